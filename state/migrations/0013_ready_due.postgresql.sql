-- Frozen once landed: migration 13 (issue 22: no walk of the ready queue when nothing is
-- claimable). Never edit; add a new migration.
-- When the earliest ready card held back by its retry backoff becomes claimable: the first
-- entry past now, not a walk of every ready card (a backlog behind a profile's cap).

CREATE INDEX ix_card_ready_due ON card (run_after) WHERE status = 'ready';
