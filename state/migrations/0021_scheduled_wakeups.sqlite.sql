-- Frozen once landed: migration 21 (SQLite). Never edit; add a new migration.

-- A card scheduled for later, or moved to another time, moves the wake-up counter too: the
-- dispatcher then sleeps until its due time. Without it the dispatcher learnt of the card
-- at its next tick and claimed it up to a tick late (744 ms at the default 1 s tick, bench
-- row 8.1, against 0.63 ms before migration 15).
CREATE TRIGGER card_wakeup_scheduled_insert AFTER INSERT ON card WHEN new.status = 'scheduled' BEGIN INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1; END;

CREATE TRIGGER card_wakeup_scheduled_update AFTER UPDATE OF status, run_after ON card WHEN new.status = 'scheduled' AND (old.status IS NOT 'scheduled' OR new.run_after IS NOT old.run_after) BEGIN INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1; END;
