-- Frozen once landed: migration 5 (idempotency keys, scheduled cards, skills, attachments,
-- full-text search). Never edit; add a new migration.
-- Trigger bodies keep each inner statement on one line: the loader splits on ";\n".

ALTER TABLE card ADD COLUMN key VARCHAR(200);

ALTER TABLE card ADD COLUMN skills VARCHAR;

ALTER TABLE cron_job ADD COLUMN skills VARCHAR;

CREATE UNIQUE INDEX ux_card_board_key ON card (board, key) WHERE key IS NOT NULL AND status NOT IN ('done', 'failed', 'cancelled');

CREATE INDEX ix_card_scheduled ON card (run_after) WHERE status = 'scheduled';

CREATE TABLE attachment (
	id INTEGER NOT NULL, 
	card_id INTEGER NOT NULL, 
	name VARCHAR(255) NOT NULL, 
	sha256 VARCHAR(64) NOT NULL, 
	size INTEGER NOT NULL, 
	media_type VARCHAR(128) NOT NULL, 
	added_by VARCHAR(128) NOT NULL, 
	at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_attachment_card_name UNIQUE (card_id, name), 
	FOREIGN KEY(card_id) REFERENCES card (id)
);

CREATE INDEX ix_attachment_sha256 ON attachment (sha256);

CREATE VIRTUAL TABLE card_fts USING fts5(title, goal, context, result, content='card', content_rowid='id');

CREATE VIRTUAL TABLE comment_fts USING fts5(body, content='comment', content_rowid='id');

CREATE VIRTUAL TABLE message_fts USING fts5(content, tool_calls, content='message', content_rowid='id');

CREATE TRIGGER card_fts_insert AFTER INSERT ON card BEGIN INSERT INTO card_fts (rowid, title, goal, context, result) VALUES (new.id, new.title, new.goal, new.context, new.result); END;

CREATE TRIGGER card_fts_delete AFTER DELETE ON card BEGIN INSERT INTO card_fts (card_fts, rowid, title, goal, context, result) VALUES ('delete', old.id, old.title, old.goal, old.context, old.result); END;

CREATE TRIGGER card_fts_update AFTER UPDATE OF title, goal, context, result ON card WHEN old.title IS NOT new.title OR old.goal IS NOT new.goal OR old.context IS NOT new.context OR old.result IS NOT new.result BEGIN INSERT INTO card_fts (card_fts, rowid, title, goal, context, result) VALUES ('delete', old.id, old.title, old.goal, old.context, old.result); INSERT INTO card_fts (rowid, title, goal, context, result) VALUES (new.id, new.title, new.goal, new.context, new.result); END;

CREATE TRIGGER comment_fts_insert AFTER INSERT ON comment BEGIN INSERT INTO comment_fts (rowid, body) VALUES (new.id, new.body); END;

CREATE TRIGGER comment_fts_delete AFTER DELETE ON comment BEGIN INSERT INTO comment_fts (comment_fts, rowid, body) VALUES ('delete', old.id, old.body); END;

CREATE TRIGGER comment_fts_update AFTER UPDATE OF body ON comment BEGIN INSERT INTO comment_fts (comment_fts, rowid, body) VALUES ('delete', old.id, old.body); INSERT INTO comment_fts (rowid, body) VALUES (new.id, new.body); END;

CREATE TRIGGER message_fts_insert AFTER INSERT ON message BEGIN INSERT INTO message_fts (rowid, content, tool_calls) VALUES (new.id, new.content, new.tool_calls); END;

CREATE TRIGGER message_fts_delete AFTER DELETE ON message BEGIN INSERT INTO message_fts (message_fts, rowid, content, tool_calls) VALUES ('delete', old.id, old.content, old.tool_calls); END;

CREATE TRIGGER message_fts_update AFTER UPDATE OF content, tool_calls ON message BEGIN INSERT INTO message_fts (message_fts, rowid, content, tool_calls) VALUES ('delete', old.id, old.content, old.tool_calls); INSERT INTO message_fts (rowid, content, tool_calls) VALUES (new.id, new.content, new.tool_calls); END;

INSERT INTO card_fts (card_fts) VALUES ('rebuild');

INSERT INTO comment_fts (comment_fts) VALUES ('rebuild');

INSERT INTO message_fts (message_fts) VALUES ('rebuild');
