UPDATE variants SET stock = 'plenty' WHERE pos = (SELECT max(pos) FROM variants);
