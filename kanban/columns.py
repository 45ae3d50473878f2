"""A board column's cards: the fields a column shows, and its pages in keyset order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kanban.activity import parse as parse_activity
from kanban.card_filter import CardFilter, filter_sql
from kanban.errors import ValidationError
from kanban.state.plans import Plan, Query, in_list
from kanban.state.rows import as_time, is_time_column
from kanban.states import TERMINAL, CardStatus

MAX_PAGE = 500
REASON_CHARS = 200  # of a blocked card's reason, read for a board (`show` has it whole)


@dataclass(frozen=True)
class BoardCard:
    """The few fields a board column shows."""

    id: int
    title: str
    priority: int
    status: str
    profile: str
    created_by: str
    created_at: datetime
    updated_at: datetime
    attempt: int
    heartbeat_at: datetime | None = None
    progress: str | None = None
    activity: str | None = None  # JSON, see kanban.activity
    run_after: datetime | None = None
    reason: str | None = None  # why a blocked card is blocked (its first REASON_CHARS)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id, "title": self.title, "priority": self.priority,
            "status": self.status, "profile": self.profile, "created_by": self.created_by,
            "created_at": self.created_at.isoformat(), "updated_at": self.updated_at.isoformat(),
            "attempt": self.attempt,
            "heartbeat_at": self.heartbeat_at.isoformat() if self.heartbeat_at else None,
            "progress": self.progress,
            "activity": parse_activity(self.activity) or None,
            "due_at": (self.run_after.isoformat()
                       if self.run_after and self.status == CardStatus.SCHEDULED else None),
            "blocked_because": self.reason,
        }

    def cursor(self) -> str:
        """Where the next page of this card's column starts (see `column_plan`)."""
        if self.status in TERMINAL:
            return f"{self.updated_at.isoformat()}~{self.id}"
        if self.status == CardStatus.SCHEDULED and self.run_after is not None:
            return f"{self.run_after.isoformat()}~{self.id}"
        return f"{self.priority}~{self.id}"


# The running card's current run comes along: its heartbeat, progress and live activity;
# a blocked card's reason, its start only (a column shows one line of it).
BOARD_CARD_SELECT = f"""
SELECT c.id, c.title, c.priority, c.status, c.profile, c.created_by, c.created_at,
       c.updated_at, c.attempt, r.heartbeat_at, r.progress, r.activity, c.run_after,
       CASE WHEN c.status = 'blocked' THEN substr(c.error, 1, {REASON_CHARS}) END
FROM card c LEFT JOIN run r ON r.card_id = c.id AND r.claim_token = c.claim_token
"""
_FIELDS = ("id", "title", "priority", "status", "profile", "created_by", "created_at",
           "updated_at", "attempt", "heartbeat_at", "progress", "activity", "run_after",
           "reason")


# Which fields are times, worked out once: a board page shapes a few hundred rows.
_TIMES = tuple(is_time_column(name) for name in _FIELDS)


def board_card(row: Sequence[Any]) -> BoardCard:
    """A BoardCard from a row of BOARD_CARD_SELECT."""
    fields: dict[str, Any] = {name: as_time(value) if time else value
                              for name, time, value in zip(_FIELDS, _TIMES, row, strict=False)}
    return BoardCard(**fields)


@dataclass(frozen=True)
class ColumnPage:
    """One page of a column, in the column's order, and where the next page starts."""

    board: str
    status: str
    cards: list[BoardCard]
    next: str | None

    def to_json(self) -> dict[str, object]:
        return {"board": self.board, "status": self.status,
                "cards": [c.to_json() for c in self.cards], "next": self.next}


def column_plan(board: str, status: str, *, limit: int = 50, after: str | None = None,
                profile: str | None = None, text: str | None = None) -> Plan[ColumnPage]:
    """A page of one column: unfinished cards by priority then id, finished ones newest
    first. `after` is the `next` of the previous page (keyset: pages stay stable while
    cards come and go)."""
    status = str(CardStatus(status))
    limit = max(1, min(limit, MAX_PAGE))
    kind = ("finished" if status in TERMINAL else
            "scheduled" if status == CardStatus.SCHEDULED else "open")
    where, params = _column_where(board, status, profile=profile, text=text)
    want = limit + 1  # one more tells whether there is a next page
    if after is None:
        rows = yield Query(_column_sql(where, kind), {**params, "limit": want})
    else:
        # The rest of the last card's key, then the keys after it: two index seeks. One
        # query with an OR of both would walk the column from its start to the cursor.
        key, after_id = _parse_cursor(after, kind != "open")
        same_key, later_keys = _KEYSET[kind]
        params.update(key=key, after_id=after_id)
        rows = yield Query(_column_sql([*where, same_key], kind), {**params, "limit": want})
        if len(rows) < want:
            rows += yield Query(_column_sql([*where, later_keys], kind),
                                {**params, "limit": want - len(rows)})
    cards = [board_card(row) for row in rows[:limit]]
    more = len(rows) > limit
    return ColumnPage(board, status, cards, cards[-1].cursor() if more and cards else None)


_ORDER = {"finished": "c.updated_at DESC, c.id DESC",
          "scheduled": "c.run_after, c.id",  # the next due first
          "open": "c.priority DESC, c.id"}
# After a page that ended at (key, after_id): the same key's later ids, then later keys.
_KEYSET = {"finished": ("c.updated_at = :key AND c.id < :after_id", "c.updated_at < :key"),
           "scheduled": ("c.run_after = :key AND c.id > :after_id", "c.run_after > :key"),
           "open": ("c.priority = :key AND c.id > :after_id", "c.priority < :key")}


def _column_sql(where: list[str], kind: str) -> str:
    return (f"{BOARD_CARD_SELECT} WHERE {' AND '.join(where)} ORDER BY {_ORDER[kind]} "
            "LIMIT :limit")


def _column_where(board: str, status: str, *, profile: str | None,
                  text: str | None) -> tuple[list[str], dict[str, object]]:
    """A column's WHERE terms. The state is a literal (a CardStatus value), so the partial
    index of a state applies; scheduled cards are read from theirs (`ix_card_scheduled`,
    in due order) with the board compared as an expression, which keeps the planner off
    the board's column index: that one would sort every scheduled card for a page."""
    where, params = filter_sql(CardFilter(board=board, profile=profile, text=text))
    if status == CardStatus.SCHEDULED:
        where = ["c.board || '' = :board" if term == "c.board = :board" else term
                 for term in where]
    return [*where, f"c.status = '{status}'"], params


def _parse_cursor(text: str, by_time: bool) -> tuple[Any, int]:
    key, sep, card_id = text.rpartition("~")
    try:
        if not sep or not (card_id.isascii() and card_id.isdigit()):
            raise ValueError(text)
        if by_time:
            moment = datetime.fromisoformat(key)
            if moment.tzinfo is None:
                raise ValueError(text)
            return moment, int(card_id)
        return int(key), int(card_id)
    except ValueError:
        raise ValidationError(f"invalid page cursor {text!r}") from None


def board_cards_plan(ids: Sequence[int]) -> Plan[list[tuple[str, bool, BoardCard]]]:
    """Cards by id as (board, archived, card): what the live stream sends when they change."""
    if not ids:
        return []
    marks, params = in_list("i", list(ids))
    select = BOARD_CARD_SELECT.replace("SELECT ", "SELECT c.board, c.archived_at, ", 1)
    rows = yield Query(f"{select} WHERE c.id IN ({marks}) ORDER BY c.id", params)
    return [(row[0], row[1] is not None, board_card(row[2:])) for row in rows]
