-- Frozen: migration 4 (the agent runtime: cost, live activity, reasoning). Never edit.

ALTER TABLE card ADD COLUMN cost FLOAT NOT NULL DEFAULT 0;

ALTER TABLE run ADD COLUMN cost FLOAT NOT NULL DEFAULT 0;

ALTER TABLE run ADD COLUMN activity VARCHAR;

ALTER TABLE run ADD COLUMN activity_at DATETIME;

ALTER TABLE message ADD COLUMN reasoning VARCHAR;

ALTER TABLE message ADD COLUMN model VARCHAR;

ALTER TABLE message ADD COLUMN data VARCHAR;

ALTER TABLE usage ADD COLUMN cost FLOAT
