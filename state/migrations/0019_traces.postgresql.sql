-- Frozen once landed: migration 19 (issue 32: traces). Never edit; add a new migration.
-- The trace a card's runs continue (a W3C traceparent): its delegating run's span for a
-- child, its own first run's span for a root. Set only while telemetry is on.

ALTER TABLE card ADD COLUMN traceparent VARCHAR(64);
