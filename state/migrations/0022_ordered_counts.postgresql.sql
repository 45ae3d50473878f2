-- Frozen once landed: migration 22 (PostgreSQL; issue 31: a fleet on one database). Never
-- edit; add a new migration.

-- The card counters are kept per statement, not per row: a statement's changes are summed
-- per counter and written in one order (board, profile, status). Per row, a claim of a
-- coder's and a writer's card locked their counters in the order it met the cards, so two
-- dispatchers on the same shard that met them in opposite orders deadlocked (PostgreSQL
-- then aborts one after deadlock_timeout, 1 s). Summing also writes a counter once per
-- statement where it was written once per card.
DROP TRIGGER card_count_insert_delete ON card;

DROP TRIGGER card_count_update ON card;

DROP FUNCTION card_count_change();

-- Transition tables cannot be declared on a trigger with a column list or a WHEN clause,
-- so the update trigger sees every update of a card (a heartbeat too): its rows enter as
-- +1 and leave as -1 on the same counter, sum to nothing and write nothing.
CREATE FUNCTION card_count_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO card_count (board, profile, status, shard, n)
        SELECT board, profile, status, pg_backend_pid() % 8, count(*) FROM entered
        WHERE archived_at IS NULL
        GROUP BY board, profile, status ORDER BY board, profile, status
        ON CONFLICT (board, profile, status, shard) DO UPDATE SET n = card_count.n + EXCLUDED.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO card_count (board, profile, status, shard, n)
        SELECT board, profile, status, pg_backend_pid() % 8, -count(*) FROM left_behind
        WHERE archived_at IS NULL
        GROUP BY board, profile, status ORDER BY board, profile, status
        ON CONFLICT (board, profile, status, shard) DO UPDATE SET n = card_count.n + EXCLUDED.n;
    ELSE
        INSERT INTO card_count (board, profile, status, shard, n)
        SELECT board, profile, status, pg_backend_pid() % 8, sum(n) FROM (
            SELECT board, profile, status, -1 AS n FROM left_behind WHERE archived_at IS NULL
            UNION ALL
            SELECT board, profile, status, 1 FROM entered WHERE archived_at IS NULL
        ) moved
        GROUP BY board, profile, status HAVING sum(n) <> 0 ORDER BY board, profile, status
        ON CONFLICT (board, profile, status, shard) DO UPDATE SET n = card_count.n + EXCLUDED.n;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER card_count_insert AFTER INSERT ON card REFERENCING NEW TABLE AS entered FOR EACH STATEMENT EXECUTE FUNCTION card_count_change();

CREATE TRIGGER card_count_update AFTER UPDATE ON card REFERENCING OLD TABLE AS left_behind NEW TABLE AS entered FOR EACH STATEMENT EXECUTE FUNCTION card_count_change();

CREATE TRIGGER card_count_delete AFTER DELETE ON card REFERENCING OLD TABLE AS left_behind FOR EACH STATEMENT EXECUTE FUNCTION card_count_change();
