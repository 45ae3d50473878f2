-- Frozen once landed: migration 14 (SQLite; issue 31: nothing an idle dispatcher or a
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
DROP TRIGGER card_count_insert;

DROP TRIGGER card_count_delete;

DROP TRIGGER card_count_leave;

DROP TRIGGER card_count_enter;

DROP TABLE card_count;

CREATE TABLE card_count (
	board VARCHAR(64) NOT NULL, 
	profile VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	n INTEGER NOT NULL, 
	PRIMARY KEY (board, profile, status)
);

INSERT INTO card_count (board, profile, status, n) SELECT board, profile, status, count(*) FROM card WHERE archived_at IS NULL GROUP BY board, profile, status;

CREATE TRIGGER card_count_insert AFTER INSERT ON card WHEN new.archived_at IS NULL BEGIN INSERT INTO card_count (board, profile, status, n) VALUES (new.board, new.profile, new.status, 1) ON CONFLICT (board, profile, status) DO UPDATE SET n = n + 1; END;

CREATE TRIGGER card_count_delete AFTER DELETE ON card WHEN old.archived_at IS NULL BEGIN UPDATE card_count SET n = n - 1 WHERE board = old.board AND profile = old.profile AND status = old.status; END;

CREATE TRIGGER card_count_leave AFTER UPDATE OF status, archived_at, board, profile ON card WHEN old.archived_at IS NULL AND (new.status IS NOT old.status OR new.archived_at IS NOT NULL OR new.board IS NOT old.board OR new.profile IS NOT old.profile) BEGIN UPDATE card_count SET n = n - 1 WHERE board = old.board AND profile = old.profile AND status = old.status; END;

CREATE TRIGGER card_count_enter AFTER UPDATE OF status, archived_at, board, profile ON card WHEN new.archived_at IS NULL AND (new.status IS NOT old.status OR old.archived_at IS NOT NULL OR new.board IS NOT old.board OR new.profile IS NOT old.profile) BEGIN INSERT INTO card_count (board, profile, status, n) VALUES (new.board, new.profile, new.status, 1) ON CONFLICT (board, profile, status) DO UPDATE SET n = n + 1; END;
