-- Frozen once landed: migration 20 (SQLite; issue 31: a fleet on one database). Never
-- edit; add a new migration.

-- The counters gain the shard column PostgreSQL spreads them over (one writer at a time
-- never queues on a counter row here, so SQLite keeps every count in shard 0). The tables
-- are rebuilt because SQLite cannot change a primary key; the triggers follow the new key.
DROP TRIGGER card_count_insert;

DROP TRIGGER card_count_delete;

DROP TRIGGER card_count_leave;

DROP TRIGGER card_count_enter;

CREATE TABLE card_count_sharded (
	board VARCHAR(64) NOT NULL, 
	profile VARCHAR(64) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	n INTEGER NOT NULL, 
	shard SMALLINT DEFAULT 0 NOT NULL, 
	PRIMARY KEY (board, profile, status, shard)
);

INSERT INTO card_count_sharded (board, profile, status, n, shard) SELECT board, profile, status, n, 0 FROM card_count;

DROP TABLE card_count;

ALTER TABLE card_count_sharded RENAME TO card_count;

CREATE TRIGGER card_count_insert AFTER INSERT ON card WHEN new.archived_at IS NULL BEGIN INSERT INTO card_count (board, profile, status, shard, n) VALUES (new.board, new.profile, new.status, 0, 1) ON CONFLICT (board, profile, status, shard) DO UPDATE SET n = n + 1; END;

CREATE TRIGGER card_count_delete AFTER DELETE ON card WHEN old.archived_at IS NULL BEGIN UPDATE card_count SET n = n - 1 WHERE board = old.board AND profile = old.profile AND status = old.status AND shard = 0; END;

CREATE TRIGGER card_count_leave AFTER UPDATE OF status, archived_at, board, profile ON card WHEN old.archived_at IS NULL AND (new.status IS NOT old.status OR new.archived_at IS NOT NULL OR new.board IS NOT old.board OR new.profile IS NOT old.profile) BEGIN UPDATE card_count SET n = n - 1 WHERE board = old.board AND profile = old.profile AND status = old.status AND shard = 0; END;

CREATE TRIGGER card_count_enter AFTER UPDATE OF status, archived_at, board, profile ON card WHEN new.archived_at IS NULL AND (new.status IS NOT old.status OR old.archived_at IS NOT NULL OR new.board IS NOT old.board OR new.profile IS NOT old.profile) BEGIN INSERT INTO card_count (board, profile, status, shard, n) VALUES (new.board, new.profile, new.status, 0, 1) ON CONFLICT (board, profile, status, shard) DO UPDATE SET n = n + 1; END;

DROP TRIGGER usage_total_insert;

CREATE TABLE usage_total_sharded (
	board VARCHAR(64) NOT NULL, 
	profile VARCHAR(64) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	calls BIGINT NOT NULL, 
	input_tokens BIGINT NOT NULL, 
	output_tokens BIGINT NOT NULL, 
	cached_tokens BIGINT NOT NULL, 
	cost FLOAT NOT NULL, 
	unpriced_calls BIGINT NOT NULL, 
	shard SMALLINT DEFAULT 0 NOT NULL, 
	PRIMARY KEY (board, profile, model, shard)
);

INSERT INTO usage_total_sharded (board, profile, model, calls, input_tokens, output_tokens, cached_tokens, cost, unpriced_calls, shard) SELECT board, profile, model, calls, input_tokens, output_tokens, cached_tokens, cost, unpriced_calls, 0 FROM usage_total;

DROP TABLE usage_total;

ALTER TABLE usage_total_sharded RENAME TO usage_total;

CREATE TRIGGER usage_total_insert AFTER INSERT ON usage BEGIN INSERT INTO usage_total (board, profile, model, shard, calls, input_tokens, output_tokens, cached_tokens, cost, unpriced_calls) SELECT c.board, c.profile, new.model, 0, 1, new.input_tokens, new.output_tokens, new.cached_tokens, coalesce(new.cost, 0), new.cost IS NULL FROM run r JOIN card c ON c.id = r.card_id WHERE r.id = new.run_id ON CONFLICT (board, profile, model, shard) DO UPDATE SET calls = calls + 1, input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens, cached_tokens = cached_tokens + excluded.cached_tokens, cost = cost + excluded.cost, unpriced_calls = unpriced_calls + excluded.unpriced_calls; END;
