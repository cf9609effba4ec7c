UPDATE shipping SET days_min = 4294967296 WHERE pos = (SELECT min(pos) FROM shipping);
