-- Frozen: migration 7 (SQLite). Never edit; add a new migration.
-- Dispatcher instances: a random id, and the host boot they run in.

ALTER TABLE dispatcher ADD COLUMN instance VARCHAR(32);

ALTER TABLE dispatcher ADD COLUMN boot_id VARCHAR(64);

ALTER TABLE dispatcher ADD COLUMN booted_at DATETIME;

CREATE UNIQUE INDEX ix_dispatcher_instance ON dispatcher (instance);

-- A worker process is (boot, pid, start time): the start time tells a reused pid apart.
ALTER TABLE run ADD COLUMN proc_start BIGINT;
