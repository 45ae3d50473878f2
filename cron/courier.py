"""Delivering results: one pass (`kanban cron tick`), or a thread beside a dispatcher's loop.

Each attempt takes its delivery row with a compare-and-set (so several dispatchers never send
one result twice), sends with no transaction open, and records the outcome and an event. A
failed attempt is retried with jittered exponential backoff until the configured attempts are
spent; the row then stays `failed`, visible in `cron show`, until `cron redeliver`. A row
left `sending` by a process that died is taken again once its lease runs out, so a restart
loses nothing; a webhook receiver can drop a repeat by the X-Kanban-Delivery header.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from kanban.cards import get_card
from kanban.comments import add_comment
from kanban.cron import ledger
from kanban.cron.checks import webhook_secret
from kanban.cron.ledger import DeliveryRecord, DeliveryStatus
from kanban.cron.senders import Context, Result, send
from kanban.cron.targets import Target, TargetKind, parse_target
from kanban.events import record_event
from kanban.state.config import Config
from kanban.state.errors import KanbanError
from kanban.state.store import Conn, Database
from kanban.state.timeutil import utcnow
from kanban.validation import MAX_COMMENT

BATCH = 20
_LEASE_MARGIN_S = 30.0


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt and how it went."""

    delivery_id: int
    job: str
    card_id: int
    target: str
    attempt: int
    status: DeliveryStatus
    error: str | None

    def to_json(self) -> dict[str, object]:
        return {"delivery_id": self.delivery_id, "job": self.job, "card_id": self.card_id,
                "target": self.target, "attempt": self.attempt, "status": str(self.status),
                "error": self.error}


class Courier:
    """Sends the results of finished fires to their targets."""

    def __init__(self, db: Database, ctx: Context, *,
                 clock: Callable[[], datetime] = utcnow,
                 rng: random.Random | None = None) -> None:
        self.db = db
        self.ctx = ctx
        self.clock = clock
        self.rng = rng or random.Random()
        settings = ctx.settings
        self.lease_s = max(settings.webhook_timeout_s, settings.command_timeout_s) \
            + _LEASE_MARGIN_S
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # one pass
    def deliver_due(self, *, limit: int = BATCH) -> list[Attempt]:
        """Try every delivery that is due now (at most `limit`)."""
        with self.db.read() as conn:
            due = ledger.due_deliveries(conn, self.clock(), limit=limit)
        return [a for delivery_id, seen in due if (a := self._attempt(delivery_id, seen))]

    def _attempt(self, delivery_id: int, seen: int) -> Attempt | None:
        attempt = seen + 1
        with self.db.write() as conn:
            if not ledger.claim_delivery(conn, delivery_id, seen, now=self.clock(),
                                         lease_s=self.lease_s):
                return None  # another process took it
            record = ledger.delivery(conn, delivery_id)
            assert record is not None
            result, target = self._result(conn, record), parse_target(record.target)
            if target.kind is TargetKind.BOARD:  # a comment: sent and recorded in one go
                error = self._comment(conn, target, result)
                return self._settle(conn, record, attempt, error)
        error = send(target, result, attempt, self.ctx)
        with self.db.write() as conn:
            return self._settle(conn, record, attempt, error)

    def _result(self, conn: Conn, record: DeliveryRecord) -> Result:
        card = get_card(conn, record.card_id)
        fired_at, scheduled_at = ledger.fire_times(conn, record.fire_id)
        text = card.result if card.status == "done" else (card.error or card.status)
        return Result(record.id, record.job, card.board, card.id, card.title, card.status,
                      text or "", fired_at, scheduled_at, card.finished_at)

    def _comment(self, conn: Conn, target: Target, result: Result) -> str | None:
        body = f"{result.heading()}\n\n{result.text}"
        if len(body) > MAX_COMMENT:
            cut = f"\n[... cut: the whole result is on #{result.card_id}]"
            body = body[:MAX_COMMENT - len(cut)] + cut
        try:
            add_comment(conn, target.card_id, body, author=f"cron:{result.job}",
                        now=self.clock())
        except KanbanError as exc:
            return exc.message
        return None

    def _settle(self, conn: Conn, record: DeliveryRecord, attempt: int,
                error: str | None) -> Attempt:
        now = self.clock()
        if error is None:
            status, next_at = DeliveryStatus.DELIVERED, now
        elif attempt >= self.ctx.settings.max_attempts:
            status, next_at = DeliveryStatus.FAILED, now
        else:
            status, next_at = DeliveryStatus.PENDING, now + self.backoff(attempt)
        ledger.settle_delivery(conn, record.id, attempt, status=status, error=error,
                               next_attempt_at=next_at, now=now)
        card = get_card(conn, record.card_id)
        record_event(conn, board=card.board, card_id=card.id, kind="delivery_attempt",
                     actor=f"cron:{record.job}", at=now, job=record.job, delivery_id=record.id,
                     target=record.target, attempt=attempt, status=str(status), error=error,
                     next_attempt_at=next_at if status is DeliveryStatus.PENDING else None)
        return Attempt(record.id, record.job, record.card_id, record.target, attempt, status,
                       error)

    def backoff(self, attempt: int) -> timedelta:
        """base·2^(attempt-1), capped, scaled by [0.5, 1) so senders do not retry in step."""
        settings = self.ctx.settings
        raw = min(settings.retry_cap_s, settings.retry_base_s * 2 ** max(0, attempt - 1))
        return timedelta(seconds=raw * (0.5 + 0.5 * self.rng.random()))

    # beside a dispatcher
    def start(self) -> Courier:
        self._thread = threading.Thread(target=self._loop, name="cron-delivery", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = len(self.deliver_due()) >= BATCH
            except Exception as exc:  # the thread must outlive a bad row or a locked database
                print(f"kanban dispatch: cron delivery: {exc}", file=sys.stderr, flush=True)
                busy = False
            if not busy:
                self._stop.wait(self.ctx.settings.poll_s)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the attempt under way (an unfinished one is retried after a restart)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def courier_for(db: Database, config: Config, home: Path, env: Mapping[str, str]) -> Courier:
    """A courier with the delivery settings and webhook secret of `config` and `env`."""
    return Courier(db, Context(config.delivery, webhook_secret(config, env), home, dict(env)))
