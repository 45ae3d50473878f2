-- Frozen once landed: migration 12 (issue 22: `kanban list` at a million cards).
-- Never edit; add a new migration.
-- A board's newest unarchived cards, read in id order without sorting the whole board.

CREATE INDEX ix_card_board_live ON card (board, id) WHERE archived_at IS NULL;
