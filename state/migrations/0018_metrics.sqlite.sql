-- Frozen once landed: migration 18 (SQLite; issue 32: metrics). Never edit; add a new
-- migration.

-- Model calls, tokens and dollars per board, profile and model, added to by a trigger as
-- each call is recorded: a /metrics scrape reads these few rows instead of summing every
-- call. Counters only grow (a purged card's calls stay counted), as Prometheus expects.
CREATE TABLE usage_total (
	board VARCHAR(64) NOT NULL, 
	profile VARCHAR(64) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	calls BIGINT NOT NULL, 
	input_tokens BIGINT NOT NULL, 
	output_tokens BIGINT NOT NULL, 
	cached_tokens BIGINT NOT NULL, 
	cost FLOAT NOT NULL, 
	unpriced_calls BIGINT NOT NULL, 
	PRIMARY KEY (board, profile, model)
);

INSERT INTO usage_total (board, profile, model, calls, input_tokens, output_tokens, cached_tokens, cost, unpriced_calls) SELECT c.board, c.profile, u.model, count(*), sum(u.input_tokens), sum(u.output_tokens), sum(u.cached_tokens), coalesce(sum(u.cost), 0), count(*) - count(u.cost) FROM usage u JOIN run r ON r.id = u.run_id JOIN card c ON c.id = r.card_id GROUP BY c.board, c.profile, u.model;

CREATE TRIGGER usage_total_insert AFTER INSERT ON usage BEGIN INSERT INTO usage_total (board, profile, model, calls, input_tokens, output_tokens, cached_tokens, cost, unpriced_calls) SELECT c.board, c.profile, new.model, 1, new.input_tokens, new.output_tokens, new.cached_tokens, coalesce(new.cost, 0), new.cost IS NULL FROM run r JOIN card c ON c.id = r.card_id WHERE r.id = new.run_id ON CONFLICT (board, profile, model) DO UPDATE SET calls = calls + 1, input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens, cached_tokens = cached_tokens + excluded.cached_tokens, cost = cost + excluded.cost, unpriced_calls = unpriced_calls + excluded.unpriced_calls; END;
