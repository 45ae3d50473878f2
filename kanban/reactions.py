"""What a card's move sets off, in one place: the actions that move cards (kanban.transitions,
kanban.review, kanban.triage) call these after kanban.machine.move, which knows none of them.

- a card that settles (finished or blocked) wakes the cards waiting on it (kanban.waiting);
- a card done frees its dependents (kanban.dependencies);
- a card failed or cancelled: its dependents follow their policy (kanban.dependency_failure),
  and the card a reviewer or decomposer served is told (`helper_ended`);
- a card back in the queue is blocked again if one of its dependencies has ended.

Callers hold a write transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kanban import dependency_failure, machine
from kanban import validation as v
from kanban.card_types import DECOMPOSER_ROLE, HELPER_ROLES, REVIEWER_ROLE, Actor
from kanban.children import SETTLED
from kanban.comments import add_comment
from kanban.dependencies import demote_dependents, promote_dependents, release_dependents
from kanban.machine import Moved
from kanban.state.store import Conn
from kanban.states import Action, CardStatus
from kanban.waiting import wake_waiters


def move(conn: Conn, card_id: int, action: Action, to: CardStatus, *, now: datetime,
         **how: Any) -> Moved:
    """kanban.machine.move, then what every move owes: a card that settles wakes the cards
    of its board waiting on it (the last child to finish resumes its parent)."""
    moved = machine.move(conn, card_id, action, to, now=now, **how)
    settled(conn, card_id, to, moved, now=now)
    return moved


def settled(conn: Conn, card_id: int, to: CardStatus, moved: Moved, *, now: datetime) -> None:
    if to in SETTLED and moved.waiters:
        wake_waiters(conn, moved.board, card_id, now=now)


def done(conn: Conn, card_id: int, *, now: datetime, actor: str, promoter: str = "system",
         moved: Moved | None = None) -> None:
    """A card is done: dependents it had blocked wait for it no more, and those whose
    dependencies are all done are ready (`moved`: only where the move saw such dependents)."""
    if moved is None or moved.blocked_dependents:  # (those it frees are promoted there)
        release_dependents(conn, card_id, now, actor=actor)
    if moved is None or moved.todo_dependents:
        promote_dependents(conn, card_id, now, actor=promoter)


def ended(conn: Conn, card_id: int, status: CardStatus, how: str, why: str | None, *,
          now: datetime, actor: Actor) -> None:
    """A card failed or was cancelled: its dependents, then the card it reviews or triages."""
    dependents_of_ended(conn, card_id, how, now=now, actor=actor.name)
    helper_ended(conn, card_id, status, why, now=now)


def dependents_of_ended(conn: Conn, card_id: int, how: str, *, now: datetime,
                        actor: str) -> list[int]:
    """`card_id` ended without being done: its waiting dependents are blocked or cancelled
    by their policy; each one cancelled reacts as any cancelled card does."""
    def cancelled(dependent: int, moved: Moved, reason: str) -> None:
        settled(conn, dependent, CardStatus.CANCELLED, moved, now=now)
        helper_ended(conn, dependent, CardStatus.CANCELLED, reason, now=now)

    return dependency_failure.dependency_ended(conn, card_id, how, now=now, actor=actor,
                                               on_cancelled=cancelled)


def helper_ended(conn: Conn, card_id: int, status: str, why: str | None, *,
                 now: datetime) -> None:
    """A reviewer or decomposer card failed or was cancelled before deciding: the card it
    served says so, and names what a person can do (nothing waits without saying why)."""
    row = conn.one("SELECT role, subject_id FROM card WHERE id = :id", {"id": card_id})
    if row is None or row[1] is None or row[0] not in HELPER_ROLES:
        return
    role, subject = row
    waiting = {REVIEWER_ROLE: CardStatus.REVIEW, DECOMPOSER_ROLE: CardStatus.TRIAGE}[role]
    if conn.scalar("SELECT status FROM card WHERE id = :id", {"id": subject}) != waiting:
        return
    todo = ("decide with `kanban approve` or `kanban reject`" if role == REVIEWER_ROLE
            else "try again with `kanban triage`, or cancel it")
    because = f": {why}" if why else ""
    add_comment(conn, subject, f"{role} card #{card_id} {status} without a "
                f"decision{because}"[:v.MAX_COMMENT - 200] + f"; {todo}",
                author="system", now=now)


def reopened(conn: Conn, card_id: int, was: str, to: CardStatus, *, now: datetime,
             actor: Actor) -> None:
    """A finished card is retried: a done one sends its ready dependents back to todo (they
    must wait for the redone result), a failed or cancelled one releases those it blocked."""
    if was == CardStatus.DONE:
        demote_dependents(conn, card_id, now, actor=actor.name)
    else:
        release_dependents(conn, card_id, now, actor=actor.name)
    requeued(conn, card_id, to, now=now, actor=actor)


def requeued(conn: Conn, card_id: int, to: CardStatus, *, now: datetime, actor: Actor) -> None:
    """A card back in todo whose dependency has failed or was cancelled waits on nobody:
    blocked, naming it."""
    if to == CardStatus.TODO:
        dependency_failure.block_if_dependency_ended(conn, card_id, now=now, actor=actor.name)
