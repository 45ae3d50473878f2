"""Subscriptions and their outbox, one transaction per call: add, list, remove, test,
redeliver, and the targets that keep failing (`kanban status` and the board show them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kanban.cards import get_card
from kanban.delivery.checks import check_target
from kanban.delivery.targets import parse_target
from kanban.errors import ValidationError
from kanban.notify.outbox import (
    EVENTS,
    SCOPES,
    Subscription,
    subscribed,
    subscriptions,
)
from kanban.state.config import Config
from kanban.state.rows import with_times
from kanban.state.store import Conn

MAX_SUBSCRIPTIONS = 200  # per board: each notified move reads them all


@dataclass(frozen=True)
class SubscriptionSpec:
    """`kanban notify add` as typed: which events, of what, to where."""

    events: tuple[str, ...]
    scope: str  # card, tree, board, profile
    scope_value: str  # a card id, a profile name, or '' for the board
    target: str


@dataclass(frozen=True)
class Backlog:
    """What a subscription (or a target) has not delivered."""

    pending: int = 0
    failed: int = 0
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"pending": self.pending, "failed": self.failed, "last_error": self.last_error}


def parse_events(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(e.strip().lower() for e in text.split(",") if e.strip()))
    unknown = [e for e in names if e not in EVENTS]
    if not names or unknown:
        raise ValidationError(f"--on takes a comma-separated list of {', '.join(EVENTS)}"
                              + (f" (not {', '.join(unknown)})" if unknown else ""))
    return names


def add(conn: Conn, board: str, spec: SubscriptionSpec, *, config: Config,
        env: Mapping[str, str], actor: str, now: datetime) -> Subscription:
    _check_scope(conn, board, spec, config)
    target = parse_target(spec.target)
    check_target(conn, target, config, env)
    if subscribed(conn, board) and len(subscriptions(conn, board)) >= MAX_SUBSCRIPTIONS:
        raise ValidationError(f"board {board} has {MAX_SUBSCRIPTIONS} subscriptions already")
    row_id = conn.scalar(
        "INSERT INTO notify_subscription (board, scope, scope_value, events, target, "
        "created_by, created_at) VALUES (:board, :scope, :value, :events, :target, :by, :now) "
        "RETURNING id", {"board": board, "scope": spec.scope, "value": spec.scope_value,
                         "events": ",".join(parse_events(",".join(spec.events))),
                         "target": str(target), "by": actor[:64], "now": now})
    return get(conn, board, int(row_id))


def _check_scope(conn: Conn, board: str, spec: SubscriptionSpec, config: Config) -> None:
    if spec.scope not in SCOPES:
        raise ValidationError(f"unknown scope {spec.scope!r} (use {', '.join(SCOPES)})")
    if spec.scope in ("card", "tree"):
        if not spec.scope_value.isdigit():
            raise ValidationError(f"--{spec.scope} takes a card id, not {spec.scope_value!r}")
        get_card(conn, int(spec.scope_value), board=board)  # CardNotFound on another board
    elif spec.scope == "profile":
        config.profile(spec.scope_value)


def get(conn: Conn, board: str, sub_id: int) -> Subscription:
    rows = conn.maps("SELECT * FROM notify_subscription WHERE id = :id AND board = :board",
                     {"id": sub_id, "board": board})
    if not rows:
        raise ValidationError(f"no notification subscription {sub_id} on board {board}")
    return Subscription.from_row(with_times(rows[0]))


def listing(conn: Conn, board: str) -> list[tuple[Subscription, Backlog]]:
    """The board's subscriptions, each with what it has not delivered."""
    backlog = {int(r[0]): Backlog(int(r[1] or 0), int(r[2] or 0), r[3]) for r in conn.all(
        "SELECT subscription_id, sum(CASE WHEN status IN ('pending', 'sending') THEN 1 "
        "ELSE 0 END), sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), max(last_error) "
        "FROM notify_outbox WHERE board = :board AND status <> 'delivered' "
        "GROUP BY subscription_id", {"board": board})}
    return [(sub, backlog.get(sub.id, Backlog()))
            for sub in (Subscription.from_row(with_times(r)) for r in conn.maps(
                "SELECT * FROM notify_subscription WHERE board = :board ORDER BY id",
                {"board": board}))]


def remove(conn: Conn, board: str, sub_id: int) -> Subscription:
    """Remove a subscription; what it already queued is still delivered."""
    sub = get(conn, board, sub_id)
    conn.run("DELETE FROM notify_subscription WHERE id = :id", {"id": sub_id})
    return sub


def redeliver(conn: Conn, board: str, *, now: datetime) -> int:
    """Failed notifications of the board go back to pending with fresh attempts."""
    return conn.run("UPDATE notify_outbox SET status = 'pending', attempts = 0, "
                    "next_attempt_at = :now, updated_at = :now "
                    "WHERE board = :board AND status = 'failed'", {"now": now, "board": board})


