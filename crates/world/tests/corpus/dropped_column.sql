ALTER TABLE variants DROP COLUMN color;
