-- Frozen: the schema of migration 1. Never edit; add a new migration.

CREATE TABLE board (
	name VARCHAR(64) NOT NULL, 
	paused BOOLEAN NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (name)
);

CREATE TABLE dispatcher (
	id SERIAL NOT NULL, 
	host VARCHAR(255) NOT NULL, 
	pid INTEGER NOT NULL, 
	board VARCHAR(64), 
	started_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	heartbeat_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	stopped_at TIMESTAMP WITH TIME ZONE, 
	PRIMARY KEY (id)
);

CREATE TABLE event (
	id SERIAL NOT NULL, 
	board VARCHAR(64) NOT NULL, 
	card_id INTEGER, 
	run_id INTEGER, 
	kind VARCHAR(32) NOT NULL, 
	actor VARCHAR(128) NOT NULL, 
	data VARCHAR NOT NULL, 
	at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_event_card_id ON event (card_id);

CREATE TABLE setting (
	key VARCHAR(64) NOT NULL, 
	value VARCHAR NOT NULL, 
	PRIMARY KEY (key)
);

CREATE TABLE card (
	id SERIAL NOT NULL, 
	board VARCHAR(64) NOT NULL, 
	title VARCHAR NOT NULL, 
	goal VARCHAR NOT NULL, 
	context VARCHAR NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	priority INTEGER NOT NULL, 
	profile VARCHAR(64) NOT NULL, 
	model VARCHAR, 
	toolsets VARCHAR, 
	parent_id INTEGER, 
	depth INTEGER NOT NULL, 
	created_by VARCHAR(128) NOT NULL, 
	attempt INTEGER NOT NULL, 
	max_attempts INTEGER NOT NULL, 
	retry_base INTEGER NOT NULL, 
	timeout_s FLOAT, 
	run_after TIMESTAMP WITH TIME ZONE NOT NULL, 
	claim_token VARCHAR(64), 
	lease_expires_at TIMESTAMP WITH TIME ZONE, 
	result VARCHAR, 
	error VARCHAR, 
	input_tokens INTEGER NOT NULL, 
	output_tokens INTEGER NOT NULL, 
	cached_tokens INTEGER NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	started_at TIMESTAMP WITH TIME ZONE, 
	finished_at TIMESTAMP WITH TIME ZONE, 
	archived_at TIMESTAMP WITH TIME ZONE, 
	PRIMARY KEY (id), 
	FOREIGN KEY(board) REFERENCES board (name), 
	FOREIGN KEY(parent_id) REFERENCES card (id)
);

CREATE INDEX ix_card_board_status ON card (board, status);

CREATE INDEX ix_card_parent_id ON card (parent_id);

CREATE INDEX ix_card_ready_queue ON card (priority DESC, id) WHERE status = 'ready';

CREATE INDEX ix_card_running_lease ON card (lease_expires_at) WHERE status = 'running';

CREATE TABLE cron_job (
	id SERIAL NOT NULL, 
	name VARCHAR(64) NOT NULL, 
	board VARCHAR(64) NOT NULL, 
	schedule VARCHAR NOT NULL, 
	timezone VARCHAR(64) NOT NULL, 
	title VARCHAR NOT NULL, 
	goal VARCHAR NOT NULL, 
	profile VARCHAR(64) NOT NULL, 
	enabled BOOLEAN NOT NULL, 
	overlap VARCHAR(8) NOT NULL, 
	next_fire_at TIMESTAMP WITH TIME ZONE, 
	last_fire_at TIMESTAMP WITH TIME ZONE, 
	last_card_id INTEGER, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (name), 
	FOREIGN KEY(board) REFERENCES board (name)
);

CREATE TABLE comment (
	id SERIAL NOT NULL, 
	card_id INTEGER NOT NULL, 
	author VARCHAR(128) NOT NULL, 
	body VARCHAR NOT NULL, 
	at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(card_id) REFERENCES card (id)
);

CREATE INDEX ix_comment_card_id ON comment (card_id);

CREATE TABLE dependency (
	card_id INTEGER NOT NULL, 
	depends_on_id INTEGER NOT NULL, 
	PRIMARY KEY (card_id, depends_on_id), 
	FOREIGN KEY(card_id) REFERENCES card (id), 
	FOREIGN KEY(depends_on_id) REFERENCES card (id)
);

CREATE INDEX ix_dependency_depends_on_id ON dependency (depends_on_id);

CREATE TABLE run (
	id SERIAL NOT NULL, 
	card_id INTEGER NOT NULL, 
	attempt INTEGER NOT NULL, 
	claim_token VARCHAR(64) NOT NULL, 
	dispatcher_id INTEGER, 
	host VARCHAR, 
	pid INTEGER, 
	started_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	heartbeat_at TIMESTAMP WITH TIME ZONE, 
	progress VARCHAR, 
	finished_at TIMESTAMP WITH TIME ZONE, 
	outcome VARCHAR(16), 
	exit_code INTEGER, 
	error VARCHAR, 
	input_tokens INTEGER NOT NULL, 
	output_tokens INTEGER NOT NULL, 
	cached_tokens INTEGER NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(card_id) REFERENCES card (id)
);

CREATE INDEX ix_run_card_id ON run (card_id);

CREATE TABLE message (
	id SERIAL NOT NULL, 
	run_id INTEGER NOT NULL, 
	seq INTEGER NOT NULL, 
	role VARCHAR(16) NOT NULL, 
	content VARCHAR, 
	tool_calls VARCHAR, 
	tool_call_id VARCHAR, 
	name VARCHAR, 
	at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES run (id)
);

CREATE INDEX ix_message_run_id ON message (run_id);

CREATE TABLE usage (
	id SERIAL NOT NULL, 
	run_id INTEGER NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	input_tokens INTEGER NOT NULL, 
	output_tokens INTEGER NOT NULL, 
	cached_tokens INTEGER NOT NULL, 
	at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES run (id)
);

CREATE INDEX ix_usage_run_id ON usage (run_id);
