-- Frozen: migration 7 (PostgreSQL). Never edit; add a new migration.
-- Dispatcher instances: a random id, and the host boot they run in.

ALTER TABLE dispatcher ADD COLUMN instance VARCHAR(32);

ALTER TABLE dispatcher ADD COLUMN boot_id VARCHAR(64);

ALTER TABLE dispatcher ADD COLUMN booted_at TIMESTAMP WITH TIME ZONE;

CREATE UNIQUE INDEX ix_dispatcher_instance ON dispatcher (instance);

-- A worker process is (boot, pid, start time): the start time tells a reused pid apart.
ALTER TABLE run ADD COLUMN proc_start BIGINT;

-- Wake-ups: NOTIFY kanban when a card becomes ready, is cancelled or (as a child)
-- finishes, and when spawning is paused or resumed. Every writer notifies, whatever
-- its language; listeners keep a slow poll as a safety net.
CREATE FUNCTION kanban_notify_card() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'ready' THEN
        PERFORM pg_notify('kanban', 'ready:' || NEW.board);
    ELSIF NEW.status = 'cancelled' THEN
        PERFORM pg_notify('kanban', 'cancelled:' || NEW.id);
    END IF;
    IF NEW.parent_id IS NOT NULL AND NEW.status IN ('done', 'failed', 'cancelled', 'blocked') THEN
        PERFORM pg_notify('kanban', 'finished:' || NEW.parent_id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER card_notify_insert AFTER INSERT ON card FOR EACH ROW
    WHEN (NEW.status = 'ready') EXECUTE FUNCTION kanban_notify_card();

CREATE TRIGGER card_notify_update AFTER UPDATE OF status ON card FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status <> 'running')
    EXECUTE FUNCTION kanban_notify_card();

CREATE FUNCTION kanban_notify_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kanban', 'paused');
    RETURN NULL;
END
$$;

CREATE TRIGGER board_notify_pause AFTER UPDATE OF paused ON board FOR EACH ROW
    WHEN (OLD.paused IS DISTINCT FROM NEW.paused) EXECUTE FUNCTION kanban_notify_pause();

CREATE TRIGGER setting_notify_pause AFTER INSERT OR UPDATE OR DELETE ON setting
    FOR EACH ROW EXECUTE FUNCTION kanban_notify_pause();
