"""Waiting cards (kanban.transitions.wait) woken when the children they delegated to have
all settled: back to ready, and their next claim resumes the conversation (the last child's
move calls `wake_waiters` through kanban.reactions)."""

from __future__ import annotations

from datetime import datetime

from kanban.card_types import Actor
from kanban.children import Delegation, unsettled, waiting_on
from kanban.machine import move
from kanban.state.store import Conn
from kanban.states import Action, CardStatus


def wake_waiters(conn: Conn, board: str, card_id: int, *, now: datetime) -> None:
    """Resume the cards of `board` waiting on `card_id`, which has just settled."""
    for waiter in waiting_on(conn, board, card_id):
        resume_if_settled(conn, waiter, now=now, actor=Actor(f"card:#{card_id}"))


def resume_if_settled(conn: Conn, card_id: int, *, now: datetime, actor: Actor) -> bool:
    """A waiting card whose children have all finished goes back to ready (its next claim
    resumes the conversation); True if it did."""
    row = conn.one("SELECT status, waiting_on FROM card WHERE id = :id", {"id": card_id})
    if row is None or row[0] != CardStatus.WAITING:
        return False
    delegation = Delegation.from_json(row[1])
    if unsettled(conn, delegation.children):
        return False
    move(conn, card_id, Action.RESUME, CardStatus.READY, actor=Actor(actor.name), now=now,
          kind="resumed", values={"run_after": now}, children=list(delegation.children))
    return True


def any_waiting(conn: Conn) -> bool:
    """Whether any card waits on children (one probe of the waiting cards' index)."""
    return conn.scalar("SELECT id FROM card WHERE status = 'waiting' ORDER BY id LIMIT 1") \
        is not None


def resume_settled(conn: Conn, *, now: datetime) -> list[int]:
    """Every waiting card whose children have all finished, back to ready (a safety net:
    the last child's transition does this itself)."""
    waiting = conn.column("SELECT id FROM card WHERE status = 'waiting' ORDER BY id")
    return [card_id for card_id in waiting
            if resume_if_settled(conn, card_id, now=now, actor=Actor("system"))]
