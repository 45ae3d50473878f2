-- Frozen once landed: migration 9 (issue 19: review gates and triage; PostgreSQL). Never edit.
-- review: the card's gate (verify:CMD, reviewer:PROFILE or human); reviews: gate rounds that
-- asked for changes; feedback: what the last one said, for the next attempt; role: reviewer,
-- decomposer or triaged (else leaf); subject_id: the card a reviewer or decomposer card acts
-- on. `role` is the same column, defined the same way, as issue 16's migration 8 adds (leaf,
-- orchestrator): when both land, this statement goes.

ALTER TABLE card ADD COLUMN review VARCHAR;

ALTER TABLE card ADD COLUMN max_reviews INTEGER NOT NULL DEFAULT 3;

ALTER TABLE card ADD COLUMN reviews INTEGER NOT NULL DEFAULT 0;

ALTER TABLE card ADD COLUMN feedback VARCHAR;

ALTER TABLE card ADD COLUMN role VARCHAR(16) NOT NULL DEFAULT 'leaf';

ALTER TABLE card ADD COLUMN subject_id INTEGER;

CREATE INDEX ix_card_subject_id ON card (subject_id);

-- the review gate of the cards a cron job creates
ALTER TABLE cron_job ADD COLUMN review VARCHAR;
