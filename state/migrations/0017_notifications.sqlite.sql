-- Frozen once landed: migration 17 (SQLite; issue 32: notifications). Never edit; add a new
-- migration.

-- `kanban notify add`: which cards' events (done, failed, blocked, approval, review,
-- cancelled) go to which target; and the outbox each event waits in, written in the same
-- transaction as the move that caused it, until the courier delivers it.

CREATE TABLE notify_subscription (
	id INTEGER NOT NULL, 
	board VARCHAR(64) NOT NULL, 
	scope VARCHAR(16) NOT NULL, 
	scope_value VARCHAR NOT NULL, 
	events VARCHAR NOT NULL, 
	target VARCHAR NOT NULL, 
	created_by VARCHAR(64) NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_notify_subscription_board ON notify_subscription (board);

CREATE TABLE notify_outbox (
	id INTEGER NOT NULL, 
	subscription_id INTEGER NOT NULL, 
	board VARCHAR(64) NOT NULL, 
	card_id INTEGER NOT NULL, 
	event VARCHAR(16) NOT NULL, 
	target VARCHAR NOT NULL, 
	payload VARCHAR NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	attempts INTEGER NOT NULL, 
	last_error VARCHAR, 
	next_attempt_at DATETIME NOT NULL, 
	lease_expires_at DATETIME, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	delivered_at DATETIME, 
	PRIMARY KEY (id), 
	FOREIGN KEY(card_id) REFERENCES card (id)
);

CREATE INDEX ix_notify_outbox_card_id ON notify_outbox (card_id);

CREATE INDEX ix_notify_outbox_due ON notify_outbox (next_attempt_at) WHERE status IN ('pending', 'sending');

CREATE INDEX ix_notify_outbox_board ON notify_outbox (board, status);
