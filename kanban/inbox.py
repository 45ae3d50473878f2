"""The inbox: every card waiting on a person, oldest first, with the commands that answer it.

One read model (a plan) for `kanban inbox` and the web board's inbox, so both list the
same items in the same JSON shape. A card waits on a person when it is

- blocked on a pending command approval (`approval`: the exact commands and rules);
- in review with nobody else to decide it (`review`: a human gate, or a reviewer card that
  ended without deciding);
- in triage with no decomposer card left to split it (`triage`);
- blocked for any other reason (`blocked`: the reason a worker, a person or a failed
  dependency gave).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kanban.approvals import PENDING, ApprovalRecord
from kanban.cards import CARD_SELECT, card_from_row, require_board_plan
from kanban.records import CardRecord
from kanban.state.plans import Plan, Query, in_list
from kanban.state.rows import with_times
from kanban.states import CardStatus

APPROVAL, REVIEW, TRIAGE, BLOCKED = "approval", "review", "triage", "blocked"
KINDS = (APPROVAL, REVIEW, TRIAGE, BLOCKED)
DEFAULT_LIMIT = 100
# Review and triage cards still served by their reviewer or decomposer card wait on it,
# not on a person (a helper card names the card it serves in subject_id).
_HELPER_BUSY = ("EXISTS (SELECT 1 FROM card h WHERE h.subject_id = c.id "
                "AND h.role IN ('reviewer', 'decomposer') "
                "AND h.status NOT IN ('done', 'failed', 'cancelled'))")
_WAITING = (f"c.archived_at IS NULL AND (c.status = 'blocked' OR "
            f"(c.status IN ('review', 'triage') AND NOT {_HELPER_BUSY}))")


@dataclass(frozen=True)
class PendingCommand:
    """A command a card's agent asked to run, and the rule that made it ask."""

    approval_id: int
    command: str
    pattern: str
    requested_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"approval_id": self.approval_id, "command": self.command,
                "rule": self.pattern, "requested_at": self.requested_at.isoformat()}


@dataclass(frozen=True)
class InboxItem:
    """One card waiting on a person: why, since when, and the commands that answer it."""

    kind: str  # approval | review | triage | blocked
    card_id: int
    board: str
    title: str
    status: str
    since: datetime  # when it began to wait
    reason: str
    answers: tuple[str, ...]  # the commands, as typed, that answer it
    commands: tuple[PendingCommand, ...] = ()  # approval only

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "card_id": self.card_id, "board": self.board,
                "title": self.title, "status": self.status, "since": self.since.isoformat(),
                "reason": self.reason, "answers": list(self.answers),
                "commands": [c.to_json() for c in self.commands]}


@dataclass(frozen=True)
class Inbox:
    """`kanban inbox --json` and GET /api/inbox: {board, items, total, more}."""

    board: str | None  # None: every board
    items: list[InboxItem] = field(default_factory=list)
    more: bool = False  # more cards wait than `limit` listed

    def to_json(self) -> dict[str, Any]:
        return {"board": self.board, "items": [i.to_json() for i in self.items],
                "total": len(self.items), "more": self.more}


def inbox_plan(board: str | None = None, *, limit: int = DEFAULT_LIMIT) -> Plan[Inbox]:
    """The cards waiting on a person (on `board`, else every board), oldest first."""
    if board is not None:
        yield from require_board_plan(board)
    where, params = _WAITING, dict[str, object](n=limit + 1)
    if board is not None:
        where, params["board"] = f"c.board = :board AND {where}", board
    rows = yield Query(f"{CARD_SELECT} c WHERE {where} ORDER BY c.updated_at, c.id LIMIT :n",
                       params)
    cards = [card_from_row(row) for row in rows]
    more = len(cards) > limit
    cards = cards[:limit]
    pending = yield from _pending_plan([c.id for c in cards if c.status == CardStatus.BLOCKED])
    items = [_item(card, pending.get(card.id, [])) for card in cards]
    return Inbox(board, sorted(items, key=lambda i: (i.since, i.card_id)), more)


def _pending_plan(card_ids: Sequence[int]) -> Plan[dict[int, list[ApprovalRecord]]]:
    found: dict[int, list[ApprovalRecord]] = {}
    if not card_ids:
        return found
    marks, params = in_list("c", list(card_ids))
    rows = yield Query(f"SELECT * FROM approval WHERE decision = '{PENDING}' "
                       f"AND card_id IN ({marks}) ORDER BY id", params)
    for row in rows.maps():
        record = ApprovalRecord.from_row(with_times(row))
        found.setdefault(record.card_id, []).append(record)
    return found


def _item(card: CardRecord, pending: list[ApprovalRecord]) -> InboxItem:
    kind, since, reason, answers = _why(card, pending)
    commands = tuple(PendingCommand(a.id, a.command, a.pattern, a.requested_at)
                     for a in pending)
    return InboxItem(kind, card.id, card.board, card.title, card.status, since, reason,
                     answers, commands)


def _why(card: CardRecord, pending: list[ApprovalRecord],
         ) -> tuple[str, datetime, str, tuple[str, ...]]:
    """The item's kind, since when it waits, why, and the commands that answer it."""
    n = card.id
    if pending:
        return (APPROVAL, pending[0].requested_at,
                "waits for approval to run: " + "; ".join(a.command for a in pending),
                (f"kanban approve {n}", f'kanban deny {n} --reason "..."'))
    if card.status == CardStatus.REVIEW:
        gate = card.review or "human"
        why = ("waits for a person's review" if gate == "human" else
               f"its {gate.partition(':')[0]} gate ended without a decision")
        return (REVIEW, card.updated_at, why,
                (f"kanban approve {n}", f'kanban reject {n} --feedback "..."'))
    if card.status == CardStatus.TRIAGE:
        return (TRIAGE, card.updated_at, "its decomposer ended without splitting it",
                (f"kanban triage {n}", f"kanban cancel {n}"))
    return (BLOCKED, card.updated_at, card.error or "blocked",
            (f'kanban unblock {n} --note "..."', f"kanban cancel {n}"))
