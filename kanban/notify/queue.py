"""Notifications on their way: the `notify_outbox` queue of the shared courier
(`kanban.delivery.courier`). Each row's payload was fixed when its transition happened."""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

from kanban.delivery.courier import Due
from kanban.delivery.rows import DeliveryStatus
from kanban.delivery.senders import Message
from kanban.events import record_event
from kanban.state.store import Conn

TABLE = "notify_outbox"


def delivery_id(row_id: int) -> str:
    """The id a receiver sees on every attempt of one notification."""
    return f"notify-{row_id}"


class NotifyQueue:
    """The `notify_outbox` rows: one event to one subscription's target."""

    name = "notify"
    table = TABLE

    def due(self, conn: Conn, now: datetime, *, limit: int,
            exclude: Collection[str]) -> list[Due]:
        marks = {f"x{n}": target for n, target in enumerate(exclude)}
        skip = f"AND target NOT IN ({', '.join(':' + m for m in marks)}) " if marks else ""
        found = conn.all(
            "SELECT id, attempts, target FROM notify_outbox "
            "WHERE status IN ('pending', 'sending') AND next_attempt_at <= :now "
            f"AND (status = 'pending' OR lease_expires_at < :now) {skip}"
            "ORDER BY next_attempt_at, id LIMIT :limit", {"now": now, "limit": limit, **marks})
        return [Due(self.name, int(i), int(n), str(t)) for i, n, t in found]

    def message(self, conn: Conn, row_id: int) -> tuple[Message, tuple[str, str]]:
        row = conn.maps("SELECT subscription_id, payload FROM notify_outbox WHERE id = :id",
                        {"id": row_id})[0]
        payload: dict[str, Any] = {**json.loads(row["payload"]),
                                   "delivery_id": delivery_id(row_id)}
        return _message(row_id, payload), ("subscription", str(row["subscription_id"]))

    def settled(self, conn: Conn, row_id: int, message: Message, attempt: int,
                status: DeliveryStatus, error: str | None,
                next_attempt_at: datetime | None, now: datetime) -> None:
        if status is DeliveryStatus.DELIVERED:
            return  # the outbox row says so; the card's history stays about the card
        record_event(conn, board=message.board, card_id=message.card_id,
                     kind="notification_attempt", actor=message.author, at=now,
                     delivery_id=message.delivery_id, attempt=attempt, status=str(status),
                     error=error, next_attempt_at=next_attempt_at)


def _message(row_id: int, payload: dict[str, Any]) -> Message:
    card_id, event = int(payload["card_id"]), str(payload["event"])
    heading = (f"{payload['at'][:19].replace('T', ' ')} UTC · card #{card_id} {event} · "
               f"{payload['title']}")
    text = payload.get("text") or ""
    return Message(
        delivery_id=delivery_id(row_id), source="notify",
        author=f"notify:{payload.get('subscription', '?')}", board=str(payload["board"]),
        card_id=card_id, heading=heading, text=text, payload=payload,
        stdin=json.dumps(payload, ensure_ascii=False, sort_keys=True).encode() + b"\n",
        env={"KANBAN_NOTIFY_EVENT": event, "KANBAN_STATUS": str(payload["status"])})
