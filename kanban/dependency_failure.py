"""What a card's dependents do when it fails or is cancelled: each by its policy.

`on_dependency_failure` is a card's own (`kanban add|edit --on-dependency-failure`), else its
board's (`kanban boards set`), default `block`:

- block: the dependent becomes `blocked`, its reason naming the dependency; retrying the
  dependency (or completing it) returns the dependent to the queue.
- cancel: the dependent is cancelled, its reason naming the dependency, and its own
  dependents follow their policy in turn. A cancelled card stays cancelled when the
  dependency is retried: only `kanban retry` of the card itself brings it back.

A card added, linked, retried or unblocked while a dependency is failed or cancelled is
blocked on that dependency (whatever its policy: a person asked for it to run), so it never waits in
`todo` for a card nobody will finish.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from kanban.card_types import Actor
from kanban.dependencies import (
    block_dependents,
    block_on,
    dependents_to_cancel,
    ended_dependency,
    failure_reason,
)
from kanban.errors import LeaseLost
from kanban.machine import Moved, move
from kanban.state.store import Conn
from kanban.states import Action, CardStatus, Outcome

# What the caller does about each dependent cancelled (its id, its move, the reason), at once
# (before the next): kanban.reactions wakes its waiters and tells the card it served.
OnCancelled = Callable[[int, Moved, str], None]


def dependency_ended(conn: Conn, card_id: int, how: str, *, now: datetime, actor: str,
                     on_cancelled: OnCancelled) -> list[int]:
    """`card_id` failed or was cancelled (`how` says which, and why): block or cancel its
    waiting dependents, cascading through cancelled ones; returns the ids cancelled."""
    cancelled: list[int] = []
    pending = [(card_id, how)]
    while pending:  # a worklist, not recursion: a long chain of cancels cannot overflow
        ended, why = pending.pop(0)
        block_dependents(conn, ended, why, now, actor=actor)
        reason = failure_reason(ended, why)
        for dependent in dependents_to_cancel(conn, ended):
            moved = _cancel_dependent(conn, dependent, ended, reason, now=now, actor=actor)
            if moved is not None:
                on_cancelled(dependent, moved, reason)
                cancelled.append(dependent)
                pending.append((dependent, f"was cancelled: {reason}"))
    return cancelled


def _cancel_dependent(conn: Conn, card_id: int, dependency_id: int, reason: str, *,
                      now: datetime, actor: str) -> Moved | None:
    try:
        return move(conn, card_id, Action.CANCEL, CardStatus.CANCELLED, actor=Actor(actor),
                    now=now, outcome=Outcome.CANCELLED, kind="dependency_cancelled",
                    values={"finished_at": now, "error": reason}, reason=reason,
                    depends_on_id=dependency_id)
    except LeaseLost:  # it left todo in the meantime (PostgreSQL): it is no longer waiting
        return None


def block_if_dependency_ended(conn: Conn, card_id: int, *, now: datetime, actor: str) -> None:
    """A card back in todo whose dependency is failed or cancelled: blocked, naming it."""
    ended = ended_dependency(conn, card_id)
    if ended is not None:
        dependency_id, status = ended
        block_on(conn, card_id, dependency_id, f"is {status}", now, actor)
