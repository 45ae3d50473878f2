-- Frozen once landed: migration 8 (issue 16). Never edit; add a new migration.
-- Durable delegation: a card's role, the children it waits for, where its conversation restarts.

ALTER TABLE card ADD COLUMN role VARCHAR(16) NOT NULL DEFAULT 'leaf';

ALTER TABLE card ADD COLUMN waiting_on VARCHAR;

ALTER TABLE card ADD COLUMN resume_base INTEGER NOT NULL DEFAULT 0;
