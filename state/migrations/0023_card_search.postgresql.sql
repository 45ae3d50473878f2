-- Frozen once landed: migration 23 (PostgreSQL; issue 31: a fleet on one database). Never
-- edit; add a new migration.

-- A card's full-text document moves out of `card` into a table of its own. As an index
-- expression on `card` (migration 5) it was parsed again, and entered again into its GIN
-- index, on every update that could not be HOT: every claim, completion, heartbeat and
-- move (a card's status and lease are indexed). Cards with a 60-word goal and a 300-word
-- context went through claim+complete at 532-573 cycles/s with it, 859-862 without.
-- The document is now written when the card is added and when its text changes, and
-- nowhere else. It is kept in two parts, the result apart, so that a completion parses its
-- result only (parsing a 360-word card took 180 us); the index is over the two joined,
-- weighted as before: title A, goal B, result C, context D.
CREATE TABLE card_search (
    card_id INTEGER NOT NULL PRIMARY KEY REFERENCES card (id) ON DELETE CASCADE,
    fields TSVECTOR NOT NULL,
    result TSVECTOR NOT NULL
);

CREATE FUNCTION card_search_fields(title TEXT, goal TEXT, context TEXT) RETURNS tsvector LANGUAGE sql IMMUTABLE AS $$
    SELECT setweight(to_tsvector('simple'::regconfig, title), 'A') ||
           setweight(to_tsvector('simple'::regconfig, goal), 'B') ||
           setweight(to_tsvector('simple'::regconfig, context), 'D')
$$;

CREATE FUNCTION card_search_result(result TEXT) RETURNS tsvector LANGUAGE sql IMMUTABLE AS $$
    SELECT setweight(to_tsvector('simple'::regconfig, coalesce(result, '')), 'C')
$$;

INSERT INTO card_search (card_id, fields, result)
SELECT id, card_search_fields(title, goal, context), card_search_result(result) FROM card;

CREATE INDEX ix_card_search_document ON card_search USING gin ((fields || result));

DROP INDEX ix_card_search;

CREATE FUNCTION card_search_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.title IS NOT DISTINCT FROM NEW.title
            AND OLD.goal IS NOT DISTINCT FROM NEW.goal
            AND OLD.context IS NOT DISTINCT FROM NEW.context THEN
        UPDATE card_search SET result = card_search_result(NEW.result) WHERE card_id = NEW.id;
        IF FOUND THEN
            RETURN NULL;
        END IF;  -- a card without its document (written with triggers off): written whole
    END IF;
    INSERT INTO card_search (card_id, fields, result)
    VALUES (NEW.id, card_search_fields(NEW.title, NEW.goal, NEW.context),
            card_search_result(NEW.result))
    ON CONFLICT (card_id) DO UPDATE SET fields = EXCLUDED.fields, result = EXCLUDED.result;
    RETURN NULL;
END $$;

CREATE TRIGGER card_search_insert AFTER INSERT ON card FOR EACH ROW EXECUTE FUNCTION card_search_write();

CREATE TRIGGER card_search_update AFTER UPDATE OF title, goal, result, context ON card FOR EACH ROW WHEN (OLD.title IS DISTINCT FROM NEW.title OR OLD.goal IS DISTINCT FROM NEW.goal OR OLD.result IS DISTINCT FROM NEW.result OR OLD.context IS DISTINCT FROM NEW.context) EXECUTE FUNCTION card_search_write();
