UPDATE specs SET product = 'P999' WHERE pos = (SELECT min(pos) FROM specs);
