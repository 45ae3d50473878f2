-- Frozen: migration 2. Never edit; add a new migration.

CREATE INDEX ix_card_board_column ON card (board, status, priority DESC, id) WHERE archived_at IS NULL;

CREATE INDEX ix_card_board_finished ON card (board, status, updated_at DESC, id DESC) WHERE archived_at IS NULL;
