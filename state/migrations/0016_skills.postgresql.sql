-- Frozen once landed: migration 16 (postgresql; issue 33: agent-written skills and the curator).
-- Never edit; add a new migration.

-- Each use of a skill: a worker read it (view), a card was given it (given), an agent wrote
-- or patched it (write, patch). The curator's "last used" is the newest row of a skill.
CREATE TABLE skill_use (
	id SERIAL NOT NULL, 
	skill VARCHAR(64) NOT NULL, 
	kind VARCHAR(8) NOT NULL, 
	card_id INTEGER, 
	profile VARCHAR(64), 
	at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_skill_use_skill ON skill_use (skill, at);

-- What a person or the curator decided about a skill: pinned (the curator and agents leave
-- it alone), and its state (active, stale, archived). No row: active, not pinned.
CREATE TABLE skill_state (
	name VARCHAR(64) NOT NULL, 
	pinned BOOLEAN NOT NULL, 
	state VARCHAR(8) NOT NULL, 
	changed_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (name)
);
