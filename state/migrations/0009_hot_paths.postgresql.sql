-- Frozen once landed: migration 12 (PostgreSQL): no scan on a hot path.
-- Never edit; add a new migration.

-- Two more queues, each a partial index in id order: the cards waiting on dependencies
-- (the dispatcher's promotion sweep) and the running ones (the live board's running set).
-- Not one index on status: the planner would prefer it to the ready queue's order and to
-- a completion's dependents, and sort or filter every card in a state to return a few.
CREATE INDEX ix_card_todo ON card (id) WHERE status = 'todo';

CREATE INDEX ix_card_running ON card (id) WHERE status = 'running';

-- Each board's column counts, kept by a trigger in the writing transaction: the board view
-- reads a handful of rows instead of counting every card it ever held.
CREATE TABLE card_count (
	board VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	n INTEGER NOT NULL, 
	PRIMARY KEY (board, status)
);

INSERT INTO card_count (board, status, n) SELECT board, status, count(*) FROM card WHERE archived_at IS NULL GROUP BY board, status;

CREATE FUNCTION card_count_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.archived_at IS NULL THEN
        UPDATE card_count SET n = n - 1 WHERE board = OLD.board AND status = OLD.status;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.archived_at IS NULL THEN
        INSERT INTO card_count (board, status, n) VALUES (NEW.board, NEW.status, 1)
        ON CONFLICT (board, status) DO UPDATE SET n = card_count.n + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER card_count_insert_delete AFTER INSERT OR DELETE ON card FOR EACH ROW EXECUTE FUNCTION card_count_change();

CREATE TRIGGER card_count_update AFTER UPDATE OF status, archived_at, board ON card FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR (OLD.archived_at IS NULL) <> (NEW.archived_at IS NULL) OR OLD.board IS DISTINCT FROM NEW.board) EXECUTE FUNCTION card_count_change();
