-- Frozen once landed: migration 22 (SQLite). Never edit; add a new migration.

-- Nothing changes here: PostgreSQL's card counters are now written per statement, in one
-- order, so concurrent writers cannot deadlock on them. SQLite has one writer at a time and
-- keeps its per-row triggers.
