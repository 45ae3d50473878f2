-- Frozen once landed: migration 21 (PostgreSQL). Never edit; add a new migration.

-- A card scheduled for later, or moved to another time, notifies too: the dispatcher then
-- sleeps until its due time instead of finding the card at its next tick (up to a tick
-- late). The update trigger now fires only for what the function says something about, so
-- a plain completion no longer calls it.
CREATE OR REPLACE FUNCTION kanban_notify_card() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'ready' THEN
        PERFORM pg_notify('kanban', 'ready:' || NEW.board);
    ELSIF NEW.status = 'cancelled' THEN
        PERFORM pg_notify('kanban', 'cancelled:' || NEW.id);
    ELSIF NEW.status = 'scheduled' THEN
        PERFORM pg_notify('kanban', 'scheduled:' || NEW.board);
    END IF;
    IF NEW.parent_id IS NOT NULL AND NEW.status IN ('done', 'failed', 'cancelled', 'blocked') THEN
        PERFORM pg_notify('kanban', 'finished:' || NEW.parent_id);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER card_notify_insert ON card;

CREATE TRIGGER card_notify_insert AFTER INSERT ON card FOR EACH ROW
    WHEN (NEW.status IN ('ready', 'scheduled')) EXECUTE FUNCTION kanban_notify_card();

DROP TRIGGER card_notify_update ON card;

CREATE TRIGGER card_notify_update AFTER UPDATE OF status, run_after ON card FOR EACH ROW
    WHEN ((OLD.status IS DISTINCT FROM NEW.status
           AND (NEW.status IN ('ready', 'cancelled', 'scheduled')
                OR (NEW.parent_id IS NOT NULL
                    AND NEW.status IN ('done', 'failed', 'cancelled', 'blocked'))))
          OR (NEW.status = 'scheduled' AND NEW.run_after IS DISTINCT FROM OLD.run_after))
    EXECUTE FUNCTION kanban_notify_card();
