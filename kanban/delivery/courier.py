"""Sending what is due from every delivery queue: one pass (`kanban cron tick`, `kanban
notify deliver`), or a thread beside a dispatcher's loop.

Each attempt takes its row with a compare-and-set (so several processes never send one
message twice), sends with no transaction open, and records the outcome. A failed attempt is
retried with jittered exponential backoff until the configured attempts are spent; the row
then stays `failed`, shown, until a redeliver command. A row left `sending` by a process that
died is taken again once its lease runs out, so a restart loses nothing; a receiver drops a
repeat by its delivery id (the X-Kanban-Delivery header), the same on every attempt.

Each target has its own lane: the rows of one target are sent one after another, and a
target that is slow or down holds only its own lane (at most `LANES` run at once), never
the rows of the others.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from kanban.comments import add_comment
from kanban.delivery import rows
from kanban.delivery.rows import DeliveryStatus
from kanban.delivery.senders import Context, Message, send
from kanban.delivery.targets import Target, TargetKind, parse_target
from kanban.state.errors import KanbanError
from kanban.state.store import Conn, Database
from kanban.state.timeutil import utcnow
from kanban.textsafety import visible
from kanban.validation import MAX_COMMENT

BATCH = 20
LANES = 8
_LEASE_MARGIN_S = 30.0


@dataclass(frozen=True)
class Due:
    """A row whose attempt is due."""

    queue: str
    row_id: int
    attempts: int
    target: str


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt and how it went."""

    source: str  # the queue: cron or notify
    delivery_id: int
    label: tuple[str, str]  # ("job", NAME) or ("subscription", ID)
    card_id: int
    target: str
    attempt: int
    status: DeliveryStatus
    error: str | None

    @property
    def job(self) -> str:
        return self.label[1]

    def to_json(self) -> dict[str, object]:
        return {"source": self.source, "delivery_id": self.delivery_id,
                self.label[0]: self.label[1], "card_id": self.card_id, "target": self.target,
                "attempt": self.attempt, "status": str(self.status), "error": self.error}


class Queue(Protocol):
    """One table of delivery rows and what its rows carry."""

    name: str
    table: str  # one of rows.TABLES

    def due(self, conn: Conn, now: datetime, *, limit: int,
            exclude: Collection[str]) -> list[Due]: ...

    def message(self, conn: Conn, row_id: int) -> tuple[Message, tuple[str, str]]: ...

    def settled(self, conn: Conn, row_id: int, message: Message, attempt: int,
                status: DeliveryStatus, error: str | None,
                next_attempt_at: datetime | None, now: datetime) -> None: ...


class Courier:
    """Sends what is due in its queues to their targets, one lane per target."""

    def __init__(self, db: Database, ctx: Context, queues: Iterable[Queue], *,
                 clock: Callable[[], datetime] = utcnow,
                 rng: random.Random | None = None, lanes: int = LANES,
                 on_error: Callable[[str], None] | None = None) -> None:
        self.db = db
        self.ctx = ctx
        self.queues = {queue.name: queue for queue in queues}
        self.clock = clock
        self.rng = rng or random.Random()
        self.lanes = lanes
        settings = ctx.settings
        self.lease_s = max(settings.webhook_timeout_s, settings.command_timeout_s) \
            + _LEASE_MARGIN_S
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._busy: dict[str, threading.Thread] = {}  # target → its lane (thread mode)
        self._lock = threading.Lock()
        self._say = on_error or _to_stderr  # beside a dispatcher: its log
        self._said: str | None = None  # the failure said last; said again only once changed

    # one pass
    def deliver_due(self, *, limit: int = BATCH) -> list[Attempt]:
        """Try every delivery that is due now (at most `limit`), the targets side by side."""
        lanes = self._lanes(self._due(limit, exclude=()))
        if not lanes:
            return []
        with ThreadPoolExecutor(min(self.lanes, len(lanes)), "delivery") as pool:
            return [a for done in pool.map(self._lane, lanes.values()) for a in done]

    def _due(self, limit: int, exclude: Collection[str]) -> list[Due]:
        now = self.clock()
        with self.db.read() as conn:
            found = [d for q in self.queues.values()
                     for d in q.due(conn, now, limit=limit, exclude=exclude)]
        return found[:limit] if len(self.queues) == 1 else found

    @staticmethod
    def _lanes(due: list[Due]) -> dict[str, list[Due]]:
        lanes: dict[str, list[Due]] = {}
        for item in due:
            lanes.setdefault(item.target, []).append(item)
        return lanes

    def _lane(self, items: list[Due]) -> list[Attempt]:
        """One target's rows in order; once it refuses one, the rest wait for the next pass
        (spending no attempt on a target that is down)."""
        done: list[Attempt] = []
        for item in items:
            attempt = self._attempt(item)
            if attempt is None:
                continue
            done.append(attempt)
            if attempt.status is not DeliveryStatus.DELIVERED:
                break
        return done

    def _attempt(self, item: Due) -> Attempt | None:
        queue, attempt = self.queues[item.queue], item.attempts + 1
        with self.db.write() as conn:
            if not rows.claim(conn, queue.table, item.row_id, item.attempts, now=self.clock(),
                              lease_s=self.lease_s):
                return None  # another process took it
            message, label = queue.message(conn, item.row_id)
            target = parse_target(item.target)
            if target.kind is TargetKind.BOARD:  # a comment: sent and recorded in one go
                error = self._comment(conn, target, message)
                return self._settle(conn, queue, item, message, label, attempt, error)
        error = send(target, message, attempt, self.ctx)
        with self.db.write() as conn:
            return self._settle(conn, queue, item, message, label, attempt, error)

    def _comment(self, conn: Conn, target: Target, message: Message) -> str | None:
        body = f"{message.heading}\n\n{message.text}"
        if len(body) > MAX_COMMENT:
            cut = f"\n[... cut: the whole text is on #{message.card_id}]"
            body = body[:MAX_COMMENT - len(cut)] + cut
        try:
            add_comment(conn, target.card_id, body, author=message.author, now=self.clock())
        except KanbanError as exc:
            return exc.message
        return None

    def _settle(self, conn: Conn, queue: Queue, item: Due, message: Message,
                label: tuple[str, str], attempt: int, error: str | None) -> Attempt:
        now = self.clock()
        if error is None:
            status, next_at = DeliveryStatus.DELIVERED, now
        elif attempt >= self.ctx.settings.max_attempts:
            status, next_at = DeliveryStatus.FAILED, now
        else:
            status, next_at = DeliveryStatus.PENDING, now + self.backoff(attempt)
        rows.settle(conn, queue.table, item.row_id, attempt, status=status, error=error,
                    next_attempt_at=next_at, now=now)
        queue.settled(conn, item.row_id, message, attempt, status, error,
                      next_at if status is DeliveryStatus.PENDING else None, now)
        return Attempt(queue.name, item.row_id, label, message.card_id, item.target, attempt,
                       status, error)

    def backoff(self, attempt: int) -> timedelta:
        """base·2^(attempt-1), capped, scaled by [0.5, 1) so senders do not retry in step."""
        settings = self.ctx.settings
        raw = min(settings.retry_cap_s, settings.retry_base_s * 2 ** max(0, attempt - 1))
        return timedelta(seconds=raw * (0.5 + 0.5 * self.rng.random()))

    # beside a dispatcher
    def start(self) -> Courier:
        self._thread = threading.Thread(target=self._loop, name="delivery", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._hand_out()
            except Exception as exc:  # the thread must outlive a bad row or a locked database
                if str(exc) != self._said:  # once per outage, not once per poll
                    self._said = str(exc)
                    self._say(self._said)
            else:
                self._said = None
            self._wake.wait(self.ctx.settings.poll_s)

    def _hand_out(self) -> None:
        """Give each idle target's due rows to a lane of its own; busy targets keep theirs.
        Lanes are daemon threads: a hung target never holds up the process's exit."""
        with self._lock:
            if len(self._busy) >= self.lanes:
                return
            busy = set(self._busy)
        for target, items in self._lanes(self._due(BATCH, exclude=busy)).items():
            with self._lock:
                if target in self._busy or len(self._busy) >= self.lanes:
                    continue
                self._busy[target] = lane = threading.Thread(
                    target=self._run_lane, args=(target, items), name="delivery-lane",
                    daemon=True)
            lane.start()

    def _run_lane(self, target: str, items: list[Due]) -> None:
        sent: list[Attempt] = []
        try:
            sent = self._lane(items)
        except Exception as exc:  # a bad row or a locked database: the next pass retries
            self._say(f"to {target}: {exc}")
        finally:
            with self._lock:
                self._busy.pop(target, None)
        if sent:
            self._wake.set()  # it sent something: more may be due

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the attempts under way, waiting up to `timeout` for them (one left
        unfinished is retried once its lease runs out)."""
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            lanes = list(self._busy.values())
        for lane in lanes:
            lane.join(max(0.0, deadline - time.monotonic()))


def _to_stderr(error: str) -> None:
    """Errors may quote what a target answered: its controls are spelled out, one line."""
    print(f"kanban: delivery: {visible(error, one_line=True)}", file=sys.stderr, flush=True)
