"""PostgreSQL connections for a fleet of workers: few, short-lived, and pooler-safe.

A worker's connections come from a `LeanPool`: at most one idle connection, closed
`IDLE_S` after its last use, so a worker waiting for its model or a command holds none.
A dispatcher bounds its workers' connections together with connection *slots*: files in a
folder of its own, one flock per open connection (`SlotGate`). The kernel drops a dead
worker's locks, so a crash never leaks a slot. A few slots are kept for lease renewals
(a thread marked `urgent`), which a busy fleet's start-up reads must never starve. A
dispatcher of W workers thus holds at most `connection_bound(W)` server connections
(docs/postgres-fleet.md).

Behind a transaction-mode pooler (PgBouncer) no session state may outlive a transaction:
timeouts are set with SET LOCAL in each one (`session_sql`), prepared statements are off
(state/postgres.py prepares them on direct connections only),
and LISTEN needs a direct connection (`listen_url`) or falls back to polling.
"""

from __future__ import annotations

import fcntl
import math
import os
import random
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

SLOTS_ENV = "KANBAN_DB_SLOTS"  # "<folder>:<count>": the dispatcher's slots, for its workers
LISTEN_ENV = "KANBAN_DB_LISTEN"  # a direct URL for LISTEN, or "off" to poll
IDLE_S = 0.1  # a worker's idle connection is closed this long after its last use
SLOT_WAIT_S = (0.002, 0.006)  # between looks for a free slot (jittered)
TURNSTILE = "turnstile"
DISPATCHER_POOL = 4  # the dispatcher's own pool (state/postgres.py POOL_MAX)
WORKERS_PER_SLOT = 8
WORKERS_PER_URGENT_SLOT = 16
MIN_SLOTS = 2
_URGENT = threading.local()


def worker_slots(max_workers: int) -> int:
    """How many connections a dispatcher's workers may hold at once (urgent ones too)."""
    return max(MIN_SLOTS, math.ceil(max_workers / WORKERS_PER_SLOT)) + \
        urgent_slots(max_workers)


def urgent_slots(max_workers: int) -> int:
    """Of those, the slots only lease renewals may take."""
    return max(1, math.ceil(max_workers / WORKERS_PER_URGENT_SLOT))


def connection_bound(max_workers: int) -> int:
    """Server connections one dispatcher holds at most: its pool, its LISTEN connection
    and its workers' slots."""
    return DISPATCHER_POOL + 1 + worker_slots(max_workers)


def mark_urgent() -> None:
    """This thread renews a lease: its connections may take the reserved slots."""
    _URGENT.on = True


def is_urgent() -> bool:
    return bool(getattr(_URGENT, "on", False))


class SlotsBusy(Exception):
    """Every slot stayed taken for the whole wait."""


class SlotGate:
    """`count` slot files in `folder`; holding an exclusive flock on one is the right to
    one open connection. The first `urgent` of them only urgent threads take."""

    def __init__(self, folder: Path, count: int, urgent: int = 0) -> None:
        self.folder = folder
        self.count = count
        self.urgent = min(urgent, count - 1)

    @classmethod
    def for_workers(cls, folder: Path, max_workers: int) -> SlotGate:
        return cls(folder, worker_slots(max_workers), urgent_slots(max_workers))

    @classmethod
    def from_env(cls, value: str | None) -> SlotGate | None:
        if not value:
            return None
        folder, _, counts = value.rpartition(":")
        count, _, urgent = counts.partition("/")
        try:
            gate = cls(Path(folder), int(count), int(urgent or 0))
        except ValueError:
            return None
        return gate if folder and gate.count > 0 else None

    @property
    def env_value(self) -> str:
        return f"{self.folder}:{self.count}/{self.urgent}"

    def create(self) -> SlotGate:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in self._files():
            (self.folder / name).touch(mode=0o600)
        return self

    def remove(self) -> None:
        for name in self._files():
            with suppress(OSError):
                (self.folder / name).unlink()
        with suppress(OSError):
            self.folder.rmdir()

    def _files(self) -> list[str]:
        return [TURNSTILE, *(f"slot-{n}" for n in range(self.count))]

    def take(self, timeout: float) -> IO[bytes] | None:
        """An open, locked slot file (closing it frees the slot); None when the folder is
        gone (the dispatcher stopped: an orphan connects ungated). SlotsBusy after
        `timeout` seconds of every slot taken.

        Ordinary takers queue on the turnstile's lock, asleep in the kernel, and only the
        one holding it looks for a free slot: a crowd of waiters burns no CPU (their
        polling starved the slots' holders of a 2-core machine). Urgent takers (few) look
        at once, at their reserved slots first."""
        deadline = time.monotonic() + timeout
        if is_urgent():
            return self._look(deadline, [*range(self.urgent)], [*range(self.urgent,
                                                                         self.count)])
        try:
            turn = open(self.folder / TURNSTILE, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return None
        with turn:
            fcntl.flock(turn.fileno(), fcntl.LOCK_EX)  # closing the file lets the next in
            return self._look(deadline, [], [*range(self.urgent, self.count)])

    def _look(self, deadline: float, reserved: list[int], shared: list[int]
              ) -> IO[bytes] | None:
        while True:
            random.shuffle(shared)
            for n in reserved + shared:
                try:
                    slot = open(self.folder / f"slot-{n}", "rb")  # noqa: SIM115 - held open
                except FileNotFoundError:
                    return None
                try:
                    fcntl.flock(slot.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    slot.close()
                    continue
                return slot
            if time.monotonic() >= deadline:
                raise SlotsBusy(f"all {self.count} connection slots in use")
            time.sleep(random.uniform(*SLOT_WAIT_S))

    def taken(self) -> int:
        """How many slots some process holds now (for tests and the bench)."""
        busy = 0
        for n in range(self.count):
            try:
                with open(self.folder / f"slot-{n}", "rb") as slot:
                    try:
                        fcntl.flock(slot.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        busy += 1
            except FileNotFoundError:
                continue
        return busy


class LeanPool:
    """The pool interface state/postgres.py uses (getconn, putconn, close), for a process
    that mostly waits: no connection opened ahead, one kept idle for `idle_s` at most, and
    each open connection holding a slot of `gate` when there is one."""

    def __init__(self, connect: Callable[[], Any], gate: SlotGate | None, *,
                 idle_s: float = IDLE_S, configure: Callable[[Any], None] | None = None,
                 check: Callable[[Any], None] | None = None) -> None:
        self._connect = connect
        self._gate = gate
        self._idle_s = idle_s
        self._configure = configure
        self._check = check
        self._cond = threading.Condition()
        self._idle: Any = None
        self._idle_until = 0.0
        self._slots: dict[int, IO[bytes] | None] = {}  # id(connection) -> its slot
        self._closed = False
        self._reaper: threading.Thread | None = None

    def getconn(self, timeout: float | None = None) -> Any:
        with self._cond:
            raw, self._idle = self._idle, None
        if raw is not None:
            try:
                if self._check is not None:
                    self._check(raw)
                return raw
            except Exception:  # noqa: BLE001 - dead while idle: open another
                self._release(raw)
        slot = self._gate.take(timeout or 0.0) if self._gate is not None else None
        raw = None
        try:
            raw = self._connect()
            if self._configure is not None:
                self._configure(raw)
        except BaseException:
            if slot is not None:
                slot.close()
            if raw is not None:
                with suppress(Exception):
                    raw.close()
            raise
        with self._cond:
            self._slots[id(raw)] = slot
        return raw

    def putconn(self, raw: Any) -> None:
        keep = not (raw.closed or raw.broken or is_urgent())  # a reserved slot goes back
        with self._cond:
            if keep and self._idle is None and not self._closed:
                self._idle, self._idle_until = raw, time.monotonic() + self._idle_s
                self._start_reaper()
                self._cond.notify_all()
                return
        self._release(raw)

    def _release(self, raw: Any) -> None:
        with suppress(Exception):
            raw.close()
        with self._cond:
            slot = self._slots.pop(id(raw), None)
        if slot is not None:
            slot.close()

    def _start_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap, name="kanban-db-idle",
                                            daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        """Close the idle connection once it has idled `idle_s`; end when none is left."""
        while True:
            with self._cond:
                if self._idle is None or self._closed:
                    return
                left = self._idle_until - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                raw, self._idle = self._idle, None
            self._release(raw)

    def close(self, timeout: float | None = None) -> None:
        with self._cond:
            self._closed = True
            raw, self._idle = self._idle, None
            self._cond.notify_all()
        if raw is not None:
            self._release(raw)

    def holding(self) -> int:
        """Connections open now (idle or in use)."""
        with self._cond:
            return len(self._slots)


def session_sql(statement_timeout_ms: int, idle_in_transaction_ms: int) -> str:
    """A transaction's start behind a pooler: BEGIN and its timeouts, in one round trip."""
    return (f"BEGIN; SET LOCAL statement_timeout = {int(statement_timeout_ms)}; "
            f"SET LOCAL idle_in_transaction_session_timeout = {int(idle_in_transaction_ms)}")


def listen_url(url: str, pooled: bool, environ: dict[str, str] | None = None) -> str | None:
    """Where to LISTEN: KANBAN_DB_LISTEN when set ("off": nowhere), else the database's own
    URL unless that is a transaction pooler (which loses notifications): None, poll."""
    given = (os.environ if environ is None else environ).get(LISTEN_ENV, "").strip()
    if given.lower() in ("off", "none", "poll"):
        return None
    if given:
        return given
    return None if pooled else url
