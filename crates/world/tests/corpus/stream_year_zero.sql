UPDATE stream SET now = '0000-01-01T00:00:00Z', started_at = '0000-01-01T00:00:00Z';
