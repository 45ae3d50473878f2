-- Frozen once landed: migration 9 (issue 19: review gates and triage; PostgreSQL). Never edit.
-- review: the card's gate (verify:CMD, reviewer:PROFILE or human); reviews: gate rounds that
-- asked for changes; feedback: what the last one said, for the next attempt; role: reviewer,
-- decomposer or triaged (in the `role` column of migration 8, beside leaf and orchestrator);
-- subject_id: the card a reviewer or decomposer card acts on.

ALTER TABLE card ADD COLUMN review VARCHAR;

ALTER TABLE card ADD COLUMN max_reviews INTEGER NOT NULL DEFAULT 3;

ALTER TABLE card ADD COLUMN reviews INTEGER NOT NULL DEFAULT 0;

ALTER TABLE card ADD COLUMN feedback VARCHAR;

ALTER TABLE card ADD COLUMN subject_id INTEGER;

CREATE INDEX ix_card_subject_id ON card (subject_id);

-- the review gate of the cards a cron job creates
ALTER TABLE cron_job ADD COLUMN review VARCHAR;
