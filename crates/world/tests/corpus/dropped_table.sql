DROP TABLE live_flash_sales;
