-- Frozen: migration 3 (SQLite): cron job kinds, per-job settings, fires and deliveries.
-- Never edit; add a new migration.

ALTER TABLE card ADD COLUMN command VARCHAR;
ALTER TABLE cron_job ADD COLUMN kind VARCHAR(8) NOT NULL DEFAULT 'agent';
ALTER TABLE cron_job ADD COLUMN command VARCHAR;
ALTER TABLE cron_job ADD COLUMN context_from VARCHAR NOT NULL DEFAULT '';
ALTER TABLE cron_job ADD COLUMN model VARCHAR;
ALTER TABLE cron_job ADD COLUMN toolsets VARCHAR;
ALTER TABLE cron_job ADD COLUMN timeout_s FLOAT;
ALTER TABLE cron_job ADD COLUMN max_attempts INTEGER;
ALTER TABLE cron_job ADD COLUMN workspace VARCHAR;
ALTER TABLE cron_job ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cron_job ADD COLUMN deliver VARCHAR NOT NULL DEFAULT '[]';
ALTER TABLE cron_job ADD COLUMN catch_up VARCHAR(8) NOT NULL DEFAULT 'once';
ALTER TABLE cron_job ADD COLUMN jitter_s INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cron_job ADD COLUMN anchor_at DATETIME;

UPDATE cron_job SET anchor_at = created_at;

CREATE TABLE cron_fire (
	id INTEGER NOT NULL, 
	job_id INTEGER NOT NULL, 
	job VARCHAR(64) NOT NULL, 
	board VARCHAR(64) NOT NULL, 
	card_id INTEGER, 
	outcome VARCHAR(16) NOT NULL, 
	manual BOOLEAN NOT NULL, 
	slots INTEGER NOT NULL, 
	scheduled_at DATETIME, 
	fired_at DATETIME NOT NULL, 
	reason VARCHAR, 
	PRIMARY KEY (id), 
	FOREIGN KEY(card_id) REFERENCES card (id)
);

CREATE INDEX ix_cron_fire_job_id ON cron_fire (job_id);

-- The fires before this migration, as far as the cards tell them.
INSERT INTO cron_fire (job_id, job, board, card_id, outcome, manual, slots, scheduled_at, fired_at)
SELECT j.id, j.name, c.board, c.id, 'fired', 1 = 0, 1, NULL, c.created_at
FROM card c JOIN cron_job j ON c.created_by = 'cron:' || j.name ORDER BY c.id;

CREATE TABLE cron_delivery (
	id INTEGER NOT NULL, 
	fire_id INTEGER NOT NULL, 
	job VARCHAR(64) NOT NULL, 
	card_id INTEGER NOT NULL, 
	target VARCHAR NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	attempts INTEGER NOT NULL, 
	last_error VARCHAR, 
	next_attempt_at DATETIME NOT NULL, 
	lease_expires_at DATETIME, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	delivered_at DATETIME, 
	PRIMARY KEY (id), 
	FOREIGN KEY(fire_id) REFERENCES cron_fire (id), 
	FOREIGN KEY(card_id) REFERENCES card (id)
);

CREATE INDEX ix_cron_delivery_fire_id ON cron_delivery (fire_id);

CREATE INDEX ix_cron_delivery_due ON cron_delivery (next_attempt_at) WHERE status IN ('pending', 'sending');
