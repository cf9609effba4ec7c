INSERT INTO stream SELECT 'S-8', title, host, started_at, now, currency, currency_symbol, on_stage FROM stream;
