-- Frozen once landed: migration 15 (PostgreSQL). Never edit; add a new migration.

-- The table SQLite's dispatchers read to tell a commit that matters from one that does not
-- (see the SQLite file). PostgreSQL says the same through NOTIFY (migration 7): nothing
-- writes here; the table exists so both stores keep one schema.
CREATE TABLE wakeup (
	id INTEGER NOT NULL, 
	seq BIGINT NOT NULL, 
	PRIMARY KEY (id)
);
