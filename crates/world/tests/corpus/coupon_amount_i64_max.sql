UPDATE coupons SET threshold_cents = 0, amount_cents = 9223372036854775807, remaining = 2147483647;
