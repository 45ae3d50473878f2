-- Frozen once landed: migration 20 (PostgreSQL; issue 31: a fleet on one database). Never
-- edit; add a new migration.

-- The counters the card and usage triggers keep are spread over 8 rows per key, the row
-- chosen by the server process that writes (pg_backend_pid() % 8). With one row per key,
-- every claim and completion of every dispatcher queued on the same few counter rows until
-- the transaction before it committed. Readers sum the shards; a shard alone may go
-- negative (a card counted in on one and out on another).
ALTER TABLE card_count ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;

ALTER TABLE card_count DROP CONSTRAINT card_count_pkey;

ALTER TABLE card_count ADD PRIMARY KEY (board, profile, status, shard);

CREATE OR REPLACE FUNCTION card_count_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    here SMALLINT := pg_backend_pid() % 8;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.archived_at IS NULL THEN
        INSERT INTO card_count (board, profile, status, shard, n)
        VALUES (OLD.board, OLD.profile, OLD.status, here, -1)
        ON CONFLICT (board, profile, status, shard) DO UPDATE SET n = card_count.n - 1;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.archived_at IS NULL THEN
        INSERT INTO card_count (board, profile, status, shard, n)
        VALUES (NEW.board, NEW.profile, NEW.status, here, 1)
        ON CONFLICT (board, profile, status, shard) DO UPDATE SET n = card_count.n + 1;
    END IF;
    RETURN NULL;
END $$;

ALTER TABLE usage_total ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;

ALTER TABLE usage_total DROP CONSTRAINT usage_total_pkey;

ALTER TABLE usage_total ADD PRIMARY KEY (board, profile, model, shard);

CREATE OR REPLACE FUNCTION usage_total_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_total (board, profile, model, shard, calls, input_tokens, output_tokens,
                             cached_tokens, cost, unpriced_calls)
    SELECT c.board, c.profile, NEW.model, pg_backend_pid() % 8, 1, NEW.input_tokens,
           NEW.output_tokens, NEW.cached_tokens, coalesce(NEW.cost, 0),
           CASE WHEN NEW.cost IS NULL THEN 1 ELSE 0 END
    FROM run r JOIN card c ON c.id = r.card_id WHERE r.id = NEW.run_id
    ON CONFLICT (board, profile, model, shard) DO UPDATE SET
        calls = usage_total.calls + 1,
        input_tokens = usage_total.input_tokens + EXCLUDED.input_tokens,
        output_tokens = usage_total.output_tokens + EXCLUDED.output_tokens,
        cached_tokens = usage_total.cached_tokens + EXCLUDED.cached_tokens,
        cost = usage_total.cost + EXCLUDED.cost,
        unpriced_calls = usage_total.unpriced_calls + EXCLUDED.unpriced_calls;
    RETURN NULL;
END $$;
