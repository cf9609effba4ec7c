-- Issue 13: a price near i64::MAX gave a negative unit price under a running sale.
UPDATE products SET price_cents = 9223372036854775807 WHERE pos = (SELECT min(pos) FROM products);
