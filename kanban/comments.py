"""Comments on cards, by people and by workers (a worker's fenced by its lease)."""

from __future__ import annotations

from datetime import datetime

from kanban import validation as v
from kanban.card_types import Actor
from kanban.errors import CardNotFound, LeaseLost
from kanban.events import record_event
from kanban.state.store import Conn


def add_comment(conn: Conn, card_id: int, body: str, *, author: str, now: datetime,
                board: str | None = None, actor: Actor | None = None) -> int:
    """Comment on a card; with a worker's actor the comment is fenced by its lease."""
    v.text(body, "comment", v.MAX_COMMENT, required=True)
    if actor is not None and actor.claim_token is not None:
        own = conn.one("SELECT id FROM card WHERE claim_token = :token AND "
                                    "status = 'running'", {"token": actor.claim_token})
        if own is None:
            raise LeaseLost(f"{actor.name}: lease lost; this worker must stop")
    target = conn.one("SELECT board FROM card WHERE id = :id", {"id": card_id})
    if target is None or (board is not None and target[0] != board):
        raise CardNotFound(card_id, board)
    comment_id = conn.scalar(
        "INSERT INTO comment (card_id, author, body, at) VALUES (:card_id, :author, :body, :at) "
        "RETURNING id", {"card_id": card_id, "author": author, "body": body, "at": now})
    record_event(conn, board=target[0], card_id=card_id, kind="commented", actor=author, at=now,
                 comment_id=comment_id)
    return int(comment_id)


UNBLOCKED = "unblocked: "  # how kanban.transitions.unblock words a person's note


def unblock_notes(conn: Conn, card_id: int) -> list[str]:
    """A person's notes from unblocking the card since its last run ended (the next attempt
    must hear them)."""
    rows = conn.all(
        "SELECT body FROM comment WHERE card_id = :id AND body LIKE :prefix AND NOT EXISTS "
        "(SELECT 1 FROM run WHERE card_id = :id AND finished_at >= comment.at) ORDER BY id",
        {"id": card_id, "prefix": f"{UNBLOCKED}%"})
    return [body.removeprefix(UNBLOCKED) for (body,) in rows]
