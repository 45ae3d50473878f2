-- Frozen once landed: migration 5 (PostgreSQL): idempotency keys, scheduled cards, skills,
-- attachments, full-text search. Never edit; add a new migration.
-- The search expressions must match kanban/search.py's queries word for word.

ALTER TABLE card ADD COLUMN key VARCHAR(200);

ALTER TABLE card ADD COLUMN skills VARCHAR;

ALTER TABLE cron_job ADD COLUMN skills VARCHAR;

CREATE UNIQUE INDEX ux_card_board_key ON card (board, key) WHERE key IS NOT NULL AND status NOT IN ('done', 'failed', 'cancelled');

CREATE INDEX ix_card_scheduled ON card (run_after) WHERE status = 'scheduled';

CREATE TABLE attachment (
	id SERIAL NOT NULL, 
	card_id INTEGER NOT NULL, 
	name VARCHAR(255) NOT NULL, 
	sha256 VARCHAR(64) NOT NULL, 
	size INTEGER NOT NULL, 
	media_type VARCHAR(128) NOT NULL, 
	added_by VARCHAR(128) NOT NULL, 
	at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_attachment_card_name UNIQUE (card_id, name), 
	FOREIGN KEY(card_id) REFERENCES card (id)
);

CREATE INDEX ix_attachment_sha256 ON attachment (sha256);

CREATE INDEX ix_card_search ON card USING gin ((setweight(to_tsvector('simple'::regconfig, title), 'A') || setweight(to_tsvector('simple'::regconfig, goal), 'B') || setweight(to_tsvector('simple'::regconfig, coalesce(result, '')), 'C') || setweight(to_tsvector('simple'::regconfig, context), 'D')));

CREATE INDEX ix_comment_search ON comment USING gin (to_tsvector('simple'::regconfig, body));

CREATE INDEX ix_message_search ON message USING gin (to_tsvector('simple'::regconfig, coalesce(content, '') || ' ' || coalesce(tool_calls, '')));
