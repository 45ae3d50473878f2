-- Frozen once landed: migration 18 (PostgreSQL; issue 32: metrics). Never edit; add a new
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

CREATE FUNCTION usage_total_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_total (board, profile, model, calls, input_tokens, output_tokens,
                             cached_tokens, cost, unpriced_calls)
    SELECT c.board, c.profile, NEW.model, 1, NEW.input_tokens, NEW.output_tokens,
           NEW.cached_tokens, coalesce(NEW.cost, 0), CASE WHEN NEW.cost IS NULL THEN 1 ELSE 0 END
    FROM run r JOIN card c ON c.id = r.card_id WHERE r.id = NEW.run_id
    ON CONFLICT (board, profile, model) DO UPDATE SET
        calls = usage_total.calls + 1,
        input_tokens = usage_total.input_tokens + EXCLUDED.input_tokens,
        output_tokens = usage_total.output_tokens + EXCLUDED.output_tokens,
        cached_tokens = usage_total.cached_tokens + EXCLUDED.cached_tokens,
        cost = usage_total.cost + EXCLUDED.cost,
        unpriced_calls = usage_total.unpriced_calls + EXCLUDED.unpriced_calls;
    RETURN NULL;
END $$;

CREATE TRIGGER usage_total_insert AFTER INSERT ON usage FOR EACH ROW EXECUTE FUNCTION usage_total_add();
