"""Approvals: a person's decision on a command (dangerous, or one the gate cannot judge) a
card's agent asked to run.

A worker under `approval = "ask"` records a pending approval and blocks its card in one
transaction. `approve` / `deny` decide every pending approval of a card and return the
card to the queue; the next attempt runs an approved command without asking and is told
of a denial. Unblocking or cancelling the card by hand withdraws its pending requests.
Every request and decision writes an event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kanban import validation as v
from kanban.cards import get_card
from kanban.errors import InvalidTransition
from kanban.events import record_event
from kanban.records import CardRecord, _Record
from kanban.state.plans import Plan, Query, run_plan
from kanban.state.rows import with_times
from kanban.state.store import Conn
from kanban.states import CardStatus
from kanban.transitions import USER, Actor, block, unblock

PENDING, APPROVED, DENIED = "pending", "approved", "denied"
WITHDRAWN = "withdrawn"  # the card was unblocked or cancelled by hand instead
MAX_COMMAND = 20_000


@dataclass(frozen=True)
class ApprovalRecord(_Record):
    id: int
    card_id: int
    run_id: int | None
    command: str
    pattern: str
    decision: str
    decided_by: str | None
    reason: str | None
    requested_at: datetime
    decided_at: datetime | None


def request(conn: Conn, card_id: int, command: str, pattern: str, *, run_id: int | None,
            actor: Actor, now: datetime) -> ApprovalRecord:
    """Record a pending approval and block the (running, fenced) card on it."""
    v.text(command, "command", MAX_COMMAND, required=True)
    approval_id = conn.scalar(
        "INSERT INTO approval (card_id, run_id, command, pattern, decision, requested_at) "
        "VALUES (:card, :run, :command, :pattern, :pending, :now) RETURNING id",
        {"card": card_id, "run": run_id, "command": command, "pattern": pattern,
         "pending": PENDING, "now": now})
    what = (pattern if pattern.startswith("unknown command") else
            f"a dangerous command (matches {pattern})")
    reason = (f"needs approval to run {what}: {command}\n"
              f"Run `kanban approve {card_id}` to let the next attempt run it, or "
              f"`kanban deny {card_id} --reason ...`.")
    block(conn, card_id, reason[:v.MAX_COMMENT], now=now, actor=actor)
    board = get_card(conn, card_id).board
    record_event(conn, board=board, card_id=card_id, run_id=run_id, kind="approval_requested",
                 actor=actor.name, at=now, approval_id=approval_id, command=command,
                 pattern=pattern)
    return _get(conn, int(approval_id))


def decide(conn: Conn, card_id: int, *, approve: bool, now: datetime, actor: Actor = USER,
           reason: str | None = None) -> tuple[CardRecord, list[ApprovalRecord]]:
    """Approve or deny every pending approval of a blocked card and requeue it."""
    if reason is not None:
        v.text(reason, "reason", v.MAX_COMMENT)
    card = get_card(conn, card_id)
    pending = for_card(conn, card_id, decision=PENDING)
    verb = "approve" if approve else "deny"
    if not pending:
        raise InvalidTransition(f"cannot {verb} #{card_id}: it has no pending approval")
    if card.status != CardStatus.BLOCKED:
        raise InvalidTransition(f"cannot {verb} #{card_id}: it is {card.status}, not blocked "
                                "on an approval")
    decision = APPROVED if approve else DENIED
    for item in pending:
        conn.run("UPDATE approval SET decision = :d, decided_by = :by, reason = :reason, "
                 "decided_at = :now WHERE id = :id",
                 {"d": decision, "by": actor.name, "reason": reason, "now": now, "id": item.id})
        record_event(conn, board=card.board, card_id=card_id, kind=f"approval_{decision}",
                     actor=actor.name, at=now, approval_id=item.id, command=item.command,
                     reason=reason)
    commands = "; ".join(item.command for item in pending)
    note = (f"approved: {commands}" if approve else
            f"denied: {commands}" + (f" (reason: {reason})" if reason else ""))
    card = unblock(conn, card_id, note[:v.MAX_COMMENT], now=now, actor=actor)
    return card, [_get(conn, item.id) for item in pending]


def decision_for(conn: Conn, card_id: int, command: str) -> ApprovalRecord | None:
    """The latest decided approval of exactly `command` on this card, if any."""
    row = conn.maps("SELECT * FROM approval WHERE card_id = :card AND command = :command AND "
                    "decision IN (:approved, :denied) ORDER BY id DESC LIMIT 1",
                    {"card": card_id, "command": command, "approved": APPROVED,
                     "denied": DENIED})
    return ApprovalRecord.from_row(with_times(row[0])) if row else None


def for_card(conn: Conn, card_id: int, *, decision: str | None = None) -> list[ApprovalRecord]:
    return run_plan(conn, for_card_plan(card_id, decision=decision))


def for_card_plan(card_id: int, *, decision: str | None = None) -> Plan[list[ApprovalRecord]]:
    sql = "SELECT * FROM approval WHERE card_id = :card"
    if decision is not None:
        sql += " AND decision = :decision"
    rows = yield Query(sql + " ORDER BY id", {"card": card_id, "decision": decision})
    return [ApprovalRecord.from_row(with_times(r)) for r in rows.maps()]


def pending_on_board(conn: Conn, board: str) -> list[ApprovalRecord]:
    return run_plan(conn, pending_on_board_plan(board))


def pending_on_board_plan(board: str) -> Plan[list[ApprovalRecord]]:
    """Pending approvals of the board's blocked cards (a card unblocked, cancelled or
    retried by hand no longer waits on its old request), oldest first."""
    # From the pending approvals (a partial index, a handful of rows) to their cards, never
    # from the board's blocked cards to their approvals: a big board has thousands of those.
    # CROSS JOIN fixes that order on SQLite ('pending' is a literal so its partial index
    # applies); ordering in Python keeps the plan off the table's rowid order.
    rows = yield Query("SELECT a.* FROM approval a CROSS JOIN card c "
                       f"WHERE a.decision = '{PENDING}' AND c.id = a.card_id "
                       "AND c.board = :board AND c.status = 'blocked'", {"board": board})
    found = [ApprovalRecord.from_row(with_times(r)) for r in rows.maps()]
    return sorted(found, key=lambda a: a.id)


def _get(conn: Conn, approval_id: int) -> ApprovalRecord:
    rows = conn.maps("SELECT * FROM approval WHERE id = :id", {"id": approval_id})
    return ApprovalRecord.from_row(with_times(rows[0]))
