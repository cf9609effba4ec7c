UPDATE products SET title = CAST(x'ff80c0' AS TEXT) WHERE pos = (SELECT max(pos) FROM products);
