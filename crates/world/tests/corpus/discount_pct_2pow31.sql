-- Issue 13: a 2^31 % flash sale was shown.
INSERT INTO flash_sales (product, discount_pct, starts_at, ends_at)
SELECT id, 2147483648, '2026-01-01T00:00:00Z', '2026-01-01T00:10:00Z' FROM products LIMIT 1;
