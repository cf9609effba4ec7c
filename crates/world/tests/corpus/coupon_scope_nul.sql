UPDATE coupons SET scope = char(0) || 'store', expires_at = '9999-12-31T23:59:59Z';
