-- Frozen once landed: migration 14 (PostgreSQL; issue 31: nothing an idle dispatcher or a
-- read command does grows with the board). Never edit; add a new migration.

-- The tick's safety net looks for waiting cards whose children have all settled: a walk of
-- the cards that wait, not a scan of every card on the board.
CREATE INDEX ix_card_waiting ON card (id) WHERE status = 'waiting';

-- `kanban stats`' windows (cards that ended in the last hour, day, week): a range of this
-- index, not every finished card.
CREATE INDEX ix_card_finished ON card (finished_at) WHERE finished_at IS NOT NULL;

-- The column counts gain the profile, so `kanban stats` (and a list filtered by profile)
-- read a handful of counters instead of counting every card; still one counter row
-- changed per transition.
DROP TRIGGER card_count_insert_delete ON card;

DROP TRIGGER card_count_update ON card;

DROP FUNCTION card_count_change();

DROP TABLE card_count;

CREATE TABLE card_count (
	board VARCHAR(64) NOT NULL, 
	profile VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	n INTEGER NOT NULL, 
	PRIMARY KEY (board, profile, status)
);

INSERT INTO card_count (board, profile, status, n) SELECT board, profile, status, count(*) FROM card WHERE archived_at IS NULL GROUP BY board, profile, status;

CREATE FUNCTION card_count_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.archived_at IS NULL THEN
        UPDATE card_count SET n = n - 1
        WHERE board = OLD.board AND profile = OLD.profile AND status = OLD.status;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.archived_at IS NULL THEN
        INSERT INTO card_count (board, profile, status, n)
        VALUES (NEW.board, NEW.profile, NEW.status, 1)
        ON CONFLICT (board, profile, status) DO UPDATE SET n = card_count.n + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER card_count_insert_delete AFTER INSERT OR DELETE ON card FOR EACH ROW EXECUTE FUNCTION card_count_change();

CREATE TRIGGER card_count_update AFTER UPDATE OF status, archived_at, board, profile ON card FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR (OLD.archived_at IS NULL) <> (NEW.archived_at IS NULL) OR OLD.board IS DISTINCT FROM NEW.board OR OLD.profile IS DISTINCT FROM NEW.profile) EXECUTE FUNCTION card_count_change();
