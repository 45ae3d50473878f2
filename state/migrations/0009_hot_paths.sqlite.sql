-- Frozen once landed: migration 12 (SQLite): no scan on a hot path.
-- Never edit; add a new migration.

-- Two more queues, each a partial index in id order: the cards waiting on dependencies
-- (the dispatcher's promotion sweep) and the running ones (the live board's running set).
-- Not one index on status: the planner would prefer it to the ready queue's order and to
-- a completion's dependents, and sort or filter every card in a state to return a few.
CREATE INDEX ix_card_todo ON card (id) WHERE status = 'todo';

CREATE INDEX ix_card_running ON card (id) WHERE status = 'running';

-- Each board's column counts, kept by triggers in the writing transaction: the board view
-- reads a handful of rows instead of counting every card it ever held.
CREATE TABLE card_count (
	board VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	n INTEGER NOT NULL, 
	PRIMARY KEY (board, status)
);

INSERT INTO card_count (board, status, n) SELECT board, status, count(*) FROM card WHERE archived_at IS NULL GROUP BY board, status;

CREATE TRIGGER card_count_insert AFTER INSERT ON card WHEN new.archived_at IS NULL BEGIN INSERT INTO card_count (board, status, n) VALUES (new.board, new.status, 1) ON CONFLICT (board, status) DO UPDATE SET n = n + 1; END;

CREATE TRIGGER card_count_delete AFTER DELETE ON card WHEN old.archived_at IS NULL BEGIN UPDATE card_count SET n = n - 1 WHERE board = old.board AND status = old.status; END;

CREATE TRIGGER card_count_leave AFTER UPDATE OF status, archived_at, board ON card WHEN old.archived_at IS NULL AND (new.status IS NOT old.status OR new.archived_at IS NOT NULL OR new.board IS NOT old.board) BEGIN UPDATE card_count SET n = n - 1 WHERE board = old.board AND status = old.status; END;

CREATE TRIGGER card_count_enter AFTER UPDATE OF status, archived_at, board ON card WHEN new.archived_at IS NULL AND (new.status IS NOT old.status OR old.archived_at IS NOT NULL OR new.board IS NOT old.board) BEGIN INSERT INTO card_count (board, status, n) VALUES (new.board, new.status, 1) ON CONFLICT (board, status) DO UPDATE SET n = n + 1; END;
