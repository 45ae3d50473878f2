-- Frozen once landed: migration 11 (issue 21: what a card does when a dependency fails or is
-- cancelled). Never edit; add a new migration.
-- card.on_dependency_failure: block | cancel, NULL: the board's; board.on_dependency_failure:
-- the board's default for its cards (block: wait, blocked, for the dependency's retry).

ALTER TABLE card ADD COLUMN on_dependency_failure VARCHAR(8);

ALTER TABLE board ADD COLUMN on_dependency_failure VARCHAR(8) NOT NULL DEFAULT 'block';
