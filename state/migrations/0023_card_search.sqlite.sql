-- Frozen once landed: migration 23 (SQLite). Never edit; add a new migration.

-- Nothing changes here: PostgreSQL's card documents move to a table of their own, written
-- only when a card's text changes. SQLite's full-text table (card_fts, migration 5) is
-- already written only then, by its own triggers.
