"""Waking the dispatcher (and any other watcher of the board) when the database changes,
without busy work. `change_watcher(db)` picks the watcher for the store.

SQLite: every commit by any process moves `PRAGMA data_version` (a read of shared
memory). On Linux, inotify on the database's folder wakes us when the WAL file is
written, so an idle dispatcher sleeps in select(); elsewhere it polls data_version.
PostgreSQL: LISTEN/NOTIFY (see NotifyWatcher).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import sqlite3
import sys
import threading
import time
from pathlib import Path

from kanban.state.retry import Backoff
from kanban.state.store import Database

_IN_MODIFY, _IN_CREATE, _IN_MOVED_TO = 0x2, 0x100, 0x80
EVENT_CHECK_S = 0.05  # how often a set `event` is noticed while sleeping in select()
# After a file event that showed no commit yet, look again every SETTLE_S, SETTLE_CHECKS
# times (25 ms in all): the commit shows up tens of microseconds later (the writer's last
# WAL write, then its wal-index update in memory), rarely a few milliseconds when the
# writer is descheduled; each look is one `PRAGMA data_version`, about 5 µs. At 1 ms a
# look, waiting out that gap was most of the wake-up's p99.
SETTLE_S = 0.0002
SETTLE_CHECKS = 125
_LISTEN_BACKOFF = Backoff(first_s=0.1, cap_s=2.0)


class _Inotify:
    def __init__(self, folder: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        mask = _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO
        if libc.inotify_add_watch(self.fd, os.fsencode(folder), mask) < 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), "inotify_add_watch")

    def wait(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self.fd, 65536):
                    pass
        return bool(ready)

    def close(self) -> None:
        os.close(self.fd)


class ChangeWatcher:
    def __init__(self, path: Path | None, *, poll_s: float = 0.005) -> None:
        self.poll_s = poll_s if path is not None else 0.25
        self._conn = sqlite3.connect(path, check_same_thread=False) if path else None
        self._notify: _Inotify | None = None
        if path is not None and sys.platform == "linux":
            with contextlib.suppress(OSError):
                self._notify = _Inotify(path.parent)
        self._last = self._version()

    def _version(self) -> int:
        if self._conn is None:
            return 0
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def wait(self, timeout: float, event: threading.Event) -> bool:
        """Block until the data changes, `event` is set, or `timeout`; True if data changed."""
        deadline = time.monotonic() + timeout
        settle = 0
        while True:
            version = self._version()
            if version != self._last:
                self._last = version
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or event.is_set():
                return False
            if self._notify is not None:
                # SQLite writes the WAL file a moment before the commit is visible in the
                # wal-index (which raises no file event): after a wake-up that shows no
                # change yet, look again shortly rather than sleeping the full interval.
                pause = SETTLE_S if settle else EVENT_CHECK_S
                settle = SETTLE_CHECKS if self._notify.wait(min(pause, remaining)) else max(
                    0, settle - 1)
            elif event.wait(min(self.poll_s, remaining)):
                return False
            if self._conn is None:
                return True  # no change signal (PostgreSQL): let the caller try a claim

    def close(self) -> None:
        if self._notify is not None:
            self._notify.close()
        if self._conn is not None:
            self._conn.close()


class NotifyWatcher:
    """The same `wait` over PostgreSQL's LISTEN/NOTIFY (triggers notify when a card becomes
    ready, is cancelled or finishes as a child, and when spawning is paused or resumed).

    A thread holds its own connection, LISTENs, and wakes every waiter on a notification; it
    reconnects with backoff when the server goes away. The callers' periodic tick stays the
    safety net for anything a notification could miss (and for the outage itself).
    """

    RECEIVE_S = 0.5  # how often the thread looks up from its socket to see if it should end

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._version = 0
        self._seen = 0
        self._waiters: set[threading.Event] = set()
        self._closed = threading.Event()
        self.listening = threading.Event()  # set while a LISTEN connection is up
        self._thread = threading.Thread(target=self._listen, name="kanban-listen", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        attempt = 0
        while not self._closed.is_set():
            conn = None
            try:
                conn = self._db.listen()  # type: ignore[attr-defined]
                self.listening.set()
                attempt = 0
                self._changed()  # whatever happened while we were not listening
                while not self._closed.is_set():
                    for _ in conn.notifies(timeout=self.RECEIVE_S):
                        self._changed()
            except Exception as exc:  # the server went away: listen again when it is back
                if self.listening.is_set():
                    print(f"kanban: change notifications interrupted ({type(exc).__name__}); "
                          "reconnecting", file=sys.stderr, flush=True)
                self.listening.clear()
                self._closed.wait(_LISTEN_BACKOFF.delay(attempt))
                attempt += 1
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()

    def _changed(self) -> None:
        with self._lock:
            self._version += 1
            waiters = list(self._waiters)
        for event in waiters:
            event.set()

    def wait(self, timeout: float, event: threading.Event) -> bool:
        """Block until a notification, `event`, or `timeout`; True if the data changed."""
        with self._lock:
            if self._version == self._seen:
                self._waiters.add(event)
                pending = False
            else:
                pending = True
        if not pending:
            try:
                event.wait(timeout)
            finally:
                with self._lock:
                    self._waiters.discard(event)
        with self._lock:
            changed, self._seen = self._version != self._seen, self._version
        return changed

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2 * self.RECEIVE_S + 1)


def change_watcher(db: Database, *, poll_s: float = 0.005) -> ChangeWatcher | NotifyWatcher:
    """The watcher for this store: data_version and inotify on SQLite, LISTEN on PostgreSQL."""
    if db.dialect == "postgresql":
        return NotifyWatcher(db)
    return ChangeWatcher(db.path, poll_s=poll_s)
