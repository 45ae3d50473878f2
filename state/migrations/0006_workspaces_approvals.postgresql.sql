-- Frozen once landed: migration 6 (issue 13). Never edit; add a new migration.

ALTER TABLE card ADD COLUMN workspace VARCHAR;

CREATE TABLE approval (
	id SERIAL NOT NULL, 
	card_id INTEGER NOT NULL, 
	run_id INTEGER, 
	command VARCHAR NOT NULL, 
	pattern VARCHAR NOT NULL, 
	decision VARCHAR(16) NOT NULL, 
	decided_by VARCHAR(128), 
	reason VARCHAR, 
	requested_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	decided_at TIMESTAMP WITH TIME ZONE, 
	PRIMARY KEY (id), 
	FOREIGN KEY(card_id) REFERENCES card (id)
);

CREATE INDEX ix_approval_card_id ON approval (card_id);

CREATE INDEX ix_approval_pending ON approval (card_id) WHERE decision = 'pending';
