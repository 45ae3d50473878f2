-- Frozen once landed: migration 15 (SQLite; issue 31: a commit that changes nothing a
-- dispatcher acts on does not wake it). Never edit; add a new migration.

-- What PostgreSQL's NOTIFY triggers say (migration 7), counted: a card becomes ready, is
-- cancelled, or (as a child) settles; spawning is paused or resumed. A dispatcher woken by
-- a commit reads this one row and goes back to sleep when it has not moved (a comment, a
-- heartbeat, a transcript turn), instead of running a step for every commit on the board.
CREATE TABLE wakeup (
	id INTEGER NOT NULL, 
	seq BIGINT NOT NULL, 
	PRIMARY KEY (id)
);

CREATE TRIGGER card_wakeup_insert AFTER INSERT ON card WHEN new.status = 'ready' BEGIN INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1; END;

CREATE TRIGGER card_wakeup_update AFTER UPDATE OF status ON card WHEN new.status IS NOT old.status AND (new.status IN ('ready', 'cancelled') OR (new.parent_id IS NOT NULL AND new.status IN ('done', 'failed', 'cancelled', 'blocked'))) BEGIN INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1; END;

CREATE TRIGGER board_wakeup_pause AFTER UPDATE OF paused ON board WHEN new.paused IS NOT old.paused BEGIN INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1; END;

CREATE TRIGGER setting_wakeup_insert AFTER INSERT ON setting BEGIN INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1; END;

CREATE TRIGGER setting_wakeup_update AFTER UPDATE ON setting BEGIN INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1; END;

CREATE TRIGGER setting_wakeup_delete AFTER DELETE ON setting BEGIN INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1; END;
