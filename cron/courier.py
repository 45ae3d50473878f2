"""Cron results on their way: the `cron_delivery` queue of the shared courier
(`kanban.delivery.courier`), which sends them beside every other delivery.

A row waits until its card is finished; its message is the card's result (or its error).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from datetime import datetime

from kanban.cards import get_card
from kanban.cron import ledger
from kanban.cron.jobs import iso
from kanban.delivery import courier
from kanban.delivery.courier import Attempt, Due
from kanban.delivery.rows import DeliveryStatus
from kanban.delivery.senders import Context, Message
from kanban.events import record_event
from kanban.state.store import Conn, Database
from kanban.state.timeutil import utcnow

__all__ = ["Attempt", "CronQueue", "Courier"]


class CronQueue:
    """The `cron_delivery` rows: a finished fire's result to each of its job's targets."""

    name = "cron"
    table = ledger.TABLE

    def due(self, conn: Conn, now: datetime, *, limit: int,
            exclude: Collection[str]) -> list[Due]:
        return [Due(self.name, row_id, attempts, target) for row_id, attempts, target
                in ledger.due_to_targets(conn, now, limit=limit, exclude=exclude)]

    def message(self, conn: Conn, row_id: int) -> tuple[Message, tuple[str, str]]:
        record = ledger.delivery(conn, row_id)
        assert record is not None
        card = get_card(conn, record.card_id)
        fired_at, scheduled_at = ledger.fire_times(conn, record.fire_id)
        text = (card.result if card.status == "done" else (card.error or card.status)) or ""
        at = card.finished_at or fired_at
        payload = {"delivery_id": record.id, "job": record.job, "board": card.board,
                   "card_id": card.id, "title": card.title, "status": card.status,
                   "result": text if card.status == "done" else None,
                   "error": None if card.status == "done" else text,
                   "fired_at": iso(fired_at), "scheduled_at": iso(scheduled_at),
                   "finished_at": iso(card.finished_at)}
        message = Message(
            delivery_id=str(record.id), source="cron", author=f"cron:{record.job}",
            board=card.board, card_id=card.id, text=text, payload=payload,
            heading=f"{at:%Y-%m-%d %H:%M:%S} UTC · cron job {record.job} · card #{card.id} "
                    f"{card.status}",
            stdin=text.encode(), env={"KANBAN_CRON_JOB": record.job,
                                      "KANBAN_STATUS": card.status, "KANBAN_TITLE": card.title})
        return message, ("job", record.job)

    def settled(self, conn: Conn, row_id: int, message: Message, attempt: int,
                status: DeliveryStatus, error: str | None,
                next_attempt_at: datetime | None, now: datetime) -> None:
        job = message.author.removeprefix("cron:")
        record_event(conn, board=message.board, card_id=message.card_id,
                     kind="delivery_attempt", actor=message.author, at=now, job=job,
                     delivery_id=row_id, target=_target(conn, row_id), attempt=attempt,
                     status=str(status), error=error, next_attempt_at=next_attempt_at)


def _target(conn: Conn, row_id: int) -> str:
    return str(conn.scalar("SELECT target FROM cron_delivery WHERE id = :id", {"id": row_id}))


class Courier(courier.Courier):
    """A courier for cron's results alone (tests, and code that sends nothing else)."""

    def __init__(self, db: Database, ctx: Context, *,
                 clock: Callable[[], datetime] = utcnow,
                 rng: random.Random | None = None) -> None:
        super().__init__(db, ctx, [CronQueue()], clock=clock, rng=rng)
