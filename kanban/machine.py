"""The card state machine's one door: `move` checks a transition against kanban.states,
applies it (fenced by the claim token for a worker), closes the run and writes the event.

It knows no policy: what a move sets off (dependents blocked or freed, waiting parents
resumed, a helper's subject told) is kanban.reactions', called by the actions above.
Callers hold a write transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from kanban.card_types import Actor
from kanban.errors import CardNotFound, LeaseLost
from kanban.events import record_event, status_change
from kanban.notify import outbox
from kanban.state.store import Conn
from kanban.states import Action, CardStatus, Outcome, check

_LEASE_HELD = "id = :card_id AND claim_token = :token AND status = 'running'"


def lease_lost(card_id: int) -> LeaseLost:
    return LeaseLost(f"lease on #{card_id} was lost; this worker must stop")


def assert_lease(conn: Conn, card_id: int, claim_token: str) -> None:
    """Raise LeaseLost unless `claim_token` still holds card_id's lease."""
    row = conn.one(f"SELECT id FROM card WHERE {_LEASE_HELD}",
                   {"card_id": card_id, "token": claim_token})
    if row is None:
        raise lease_lost(card_id)


def _current_status(conn: Conn, card_id: int, board: str | None) -> str:
    row = conn.one("SELECT status, board FROM card WHERE id = :id", {"id": card_id})
    if row is None or (board is not None and row[1] != board):
        raise CardNotFound(card_id, board)
    return str(row[0])


class Moved(NamedTuple):
    """What a transition's UPDATE … RETURNING told: the board, whether cards that depend
    on this one wait in todo or are blocked by it, and whether any card of the board waits
    on children (false: no statement for them)."""

    board: str
    todo_dependents: bool
    blocked_dependents: bool
    waiters: bool = False


# Answered by the UPDATE itself (indexes on depends_on_id and on board and status), so a
# card without such dependents, on a board where nothing waits, costs no further statement.
# (The CAST: SQLite gives a RETURNING column no affinity, and would scan the index without.)
_DEPENDENT_IN = ("EXISTS (SELECT 1 FROM dependency d JOIN card x ON x.id = d.card_id "
                 "WHERE d.depends_on_id = card.id AND x.status = '{}')")
_MOVED = (f"RETURNING board, {_DEPENDENT_IN.format('todo')}, {_DEPENDENT_IN.format('blocked')}, "
          "EXISTS (SELECT 1 FROM card w WHERE w.board = CAST(card.board AS TEXT) "
          "AND w.status = 'waiting')")
# A move into a state subscribers hear of also asks whether its board has subscriptions.
_MOVED_NOTIFIED = f"{_MOVED}, {outbox.SUBSCRIBED}"


def move(
    conn: Conn,
    card_id: int,
    action: Action,
    to: CardStatus,
    *,
    actor: Actor,
    now: datetime,
    board: str | None = None,
    outcome: Outcome | None = None,
    kind: str | None = None,
    values: dict[str, Any] | None = None,
    guard: str | None = None,
    **data: Any,
) -> Moved:
    """Check, update (fenced for workers), close the run, write the event; returns the board
    and what the update saw of the card's dependents and waiters. `guard`: one more
    condition of the update (unmet: LeaseLost, as a lost lease is)."""
    params: dict[str, Any] = {"card_id": card_id}
    if actor.claim_token is not None:
        frm, where = CardStatus.RUNNING.value, _LEASE_HELD
        params["token"] = actor.claim_token
    else:
        frm, where = _current_status(conn, card_id, board), "id = :card_id AND status = :frm"
        params["frm"] = frm
    check(action, frm, card_id)
    changes: dict[str, Any] = {"status": to, "updated_at": now, **(values or {})}
    if frm == CardStatus.RUNNING:
        changes.update(claim_token=None, lease_expires_at=None)
    params.update({f"set_{k}": value for k, value in changes.items()})
    sets = ", ".join(f"{k} = :set_{k}" for k in changes)
    if guard is not None:
        where = f"{where} AND {guard}"
    notified = to in outbox.NOTIFIED
    row = conn.one(f"UPDATE card SET {sets} WHERE {where} "
                   f"{_MOVED_NOTIFIED if notified else _MOVED}", params)
    if row is None:
        raise lease_lost(card_id)
    run_id = None
    if outcome is not None and frm == CardStatus.RUNNING:
        run_id = _close_run(conn, card_id, outcome, now, error=data.get("error"))
    record_event(conn, board=row[0], card_id=card_id, run_id=run_id, kind=kind or action,
                 actor=actor.name, at=now, **status_change(frm, to, **data))
    if notified and row[4]:  # written with the move, so no event is lost or sent early
        outbox.queue(conn, row[0], card_id, frm, to, actor=actor.name, now=now)
    return Moved(str(row[0]), bool(row[1]), bool(row[2]), bool(row[3]))


def _close_run(conn: Conn, card_id: int, outcome: Outcome, now: datetime,
               error: str | None = None) -> int | None:
    row = conn.one("UPDATE run SET finished_at = :now, outcome = :outcome, "
                   "error = :error WHERE card_id = :card_id AND finished_at IS NULL "
                   "RETURNING id",
                   {"now": now, "outcome": outcome, "error": error, "card_id": card_id})
    return row[0] if row else None
