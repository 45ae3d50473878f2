"""Writing a transition's notifications into `notify_outbox`, in the transition's transaction.

`kanban.machine.move` (the one place a card changes state) asks, inside its UPDATE's
RETURNING, whether the card's board has any subscription at all (`SUBSCRIBED`, an indexed
EXISTS): a board with none costs no further statement and writes nothing. Otherwise the
card's subscriptions are matched here and one row per matching subscription is queued, its
payload (the card's text cleaned of controls and bounded) fixed at the moment it happened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kanban.state.rows import as_time, with_times
from kanban.state.store import Conn
from kanban.textsafety import clean_text, strip_controls

EVENTS = ("done", "failed", "blocked", "approval", "review", "cancelled")
# The states whose arrival is an event ('approval' is a block on a pending approval).
NOTIFIED = frozenset({"done", "failed", "blocked", "review", "cancelled"})
SCOPES = ("card", "tree", "board", "profile")
TITLE_CAP = 200
TEXT_CAP = 4000
# One more column of a notified transition's RETURNING (see kanban.machine).
SUBSCRIBED = ("EXISTS (SELECT 1 FROM notify_subscription s "
              "WHERE s.board = CAST(card.board AS TEXT))")


@dataclass(frozen=True)
class Subscription:
    id: int
    board: str
    scope: str
    scope_value: str
    events: tuple[str, ...]
    target: str
    created_by: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Subscription:
        return cls(int(row["id"]), row["board"], row["scope"], row["scope_value"],
                   tuple(e for e in str(row["events"]).split(",") if e), row["target"],
                   row["created_by"], row["created_at"])

    @property
    def scope_text(self) -> str:
        if self.scope == "board":
            return f"board {self.board}"
        return f"{self.scope} #{self.scope_value}" if self.scope in ("card", "tree") \
            else f"profile {self.scope_value}"


def subscriptions(conn: Conn, board: str) -> list[Subscription]:
    return [Subscription.from_row(with_times(r)) for r in conn.maps(
        "SELECT * FROM notify_subscription WHERE board = :board ORDER BY id", {"board": board})]


def subscribed(conn: Conn, board: str) -> bool:
    """Whether anything on `board` is subscribed to (one indexed lookup)."""
    return conn.scalar("SELECT 1 FROM notify_subscription WHERE board = :board LIMIT 1",
                       {"board": board}) is not None


def _ancestors(conn: Conn, card_id: int) -> set[str]:
    """The card and every card above it (the trees it belongs to), as text."""
    ids = conn.column(
        "WITH RECURSIVE up(id, parent_id) AS (SELECT id, parent_id FROM card WHERE id = :id "
        "UNION ALL SELECT c.id, c.parent_id FROM card c JOIN up ON c.id = up.parent_id) "
        "SELECT id FROM up", {"id": card_id})
    return {str(i) for i in ids}


def _matches(sub: Subscription, event: str, card: dict[str, Any],
             trees: set[str] | None) -> bool:
    if event not in sub.events:
        return False
    if sub.scope == "card":
        return sub.scope_value == str(card["id"])
    if sub.scope == "tree":
        return trees is not None and sub.scope_value in trees
    if sub.scope == "profile":
        return sub.scope_value == card["profile"]
    return True


def event_of(conn: Conn, card_id: int, to: str) -> str:
    """The event a move to `to` is: a block on a pending approval is 'approval'."""
    if to == "blocked" and conn.scalar(
            "SELECT 1 FROM approval WHERE card_id = :id AND decision = 'pending' LIMIT 1",
            {"id": card_id}) is not None:
        return "approval"
    return to


def queue(conn: Conn, board: str, card_id: int, frm: str, to: str, *, actor: str,
          now: datetime) -> int:
    """Queue the card's notifications for its move `frm` → `to`; how many were queued."""
    subs = subscriptions(conn, board)
    event = event_of(conn, card_id, to)
    subs = [s for s in subs if event in s.events]
    if not subs:
        return 0
    card = conn.maps("SELECT id, title, profile, status, result, error, attempt, parent_id "
                     "FROM card WHERE id = :id", {"id": card_id})[0]
    trees = _ancestors(conn, card_id) if any(s.scope == "tree" for s in subs) else None
    payload = _payload(board, card, event, frm, actor, now)
    queued = 0
    for sub in subs:
        if _matches(sub, event, card, trees):
            _insert(conn, sub, card_id, event, {**payload, "subscription": sub.id}, now)
            queued += 1
    return queued


def _payload(board: str, card: dict[str, Any], event: str, frm: str, actor: str,
             now: datetime) -> dict[str, Any]:
    """What the receiver learns: ids and states as they are, the card's text cleaned of
    control characters and bounded (JSON escapes the rest)."""
    text = card["result"] if event == "done" else card["error"]
    return {"event": event, "board": board, "card_id": int(card["id"]),
            "title": strip_controls(str(card["title"])).replace("\n", " ")[:TITLE_CAP],
            "status": card["status"], "from": frm, "attempt": card["attempt"],
            "parent_id": card["parent_id"], "profile": card["profile"],
            "actor": strip_controls(actor)[:64], "at": now.isoformat(),
            "text": clean_text(str(text), TEXT_CAP) if text else None}


def _insert(conn: Conn, sub: Subscription, card_id: int, event: str,
            payload: dict[str, Any], now: datetime) -> None:
    conn.run(
        "INSERT INTO notify_outbox (subscription_id, board, card_id, event, target, payload, "
        "status, attempts, next_attempt_at, created_at, updated_at) VALUES (:sub, :board, "
        ":card, :event, :target, :payload, 'pending', 0, :now, :now, :now)",
        {"sub": sub.id, "board": sub.board, "card": card_id, "event": event,
         "target": sub.target, "payload": json.dumps(payload, sort_keys=True), "now": now})


@dataclass(frozen=True)
class FailingTarget:
    """A target whose notifications keep failing: retried or kept, never dropped."""

    target: str
    board: str
    failed: int  # attempts spent: `kanban notify redeliver` queues them again
    retrying: int  # still being retried with backoff
    last_error: str | None
    since: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "board": self.board, "failed": self.failed,
                "retrying": self.retrying, "last_error": self.last_error,
                "since": self.since.isoformat() if self.since else None}


def failing_targets(conn: Conn, board: str | None = None) -> list[FailingTarget]:
    """Targets with notifications that failed at least once and are not delivered."""
    where = "AND board = :board " if board is not None else ""
    rows = conn.all(
        "SELECT target, board, sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), "
        "sum(CASE WHEN status <> 'failed' THEN 1 ELSE 0 END), max(last_error), min(created_at) "
        "FROM notify_outbox WHERE status IN ('pending', 'sending', 'failed') "
        f"AND last_error IS NOT NULL {where}GROUP BY target, board ORDER BY board, target",
        {"board": board})
    return [FailingTarget(str(t), str(b), int(f or 0), int(r or 0), e, as_time(s))
            for t, b, f, r, e, s in rows]
