"""Waking the dispatcher (and any other watcher of the board) when the database changes,
without busy work. `change_watcher(db)` picks the watcher for the store.

SQLite: every commit by any process moves `PRAGMA data_version` (a read of shared
memory). On Linux, inotify on the database's folder wakes us when the WAL file is
written, so an idle dispatcher sleeps in select(); elsewhere it polls data_version. A
dispatcher, which acts only on what moves the wake-up counter, sleeps on the board's
wake-up file instead (state/wakefile.py), rung by kanban's writers after such commits.
PostgreSQL: LISTEN/NOTIFY (see NotifyWatcher).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import time
import weakref
from pathlib import Path

from kanban.state.inotify import (
    IN_ATTRIB,
    IN_CREATE,
    IN_DELETE_SELF,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_TO,
    Inotify,
)
from kanban.state.retry import Backoff
from kanban.state.store import Database
from kanban.state.wakefile import open_wakefile, wakefile_path

_MASK = IN_MODIFY | IN_CREATE | IN_MOVED_TO
_WAKEFILE_MASK = IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF
EVENT_CHECK_S = 0.05  # how often a set `event` is noticed while sleeping in select()
# After a file event that showed no commit yet, look again after SETTLE_S, then after
# twice as long each time, SETTLE_CHECKS times (about 26 ms in all): the commit shows up
# tens of microseconds later (the writer's last WAL write, then its wal-index update in
# memory), rarely a few milliseconds when the writer is descheduled; each look is one
# `PRAGMA data_version`, about 5 µs. Looks at a fixed 0.2 ms (125 of them) cost an idle
# dispatcher 1% of a core, spent after its own heartbeat's write; at 1 ms a look, waiting
# out the gap was most of the wake-up's p99.
SETTLE_S = 0.0001
SETTLE_CHECKS = 8
_LISTEN_BACKOFF = Backoff(first_s=0.1, cap_s=2.0)


class Doorbell(threading.Event):
    """An Event that also rings a pipe, so a watcher sleeping in select() hears `set()` at
    once instead of looking at the event every EVENT_CHECK_S (20 wake-ups a second that an
    idle dispatcher paid for nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # closed with the object, never before: a set() must not write into a reused fd
        weakref.finalize(self, _close_all, self._read, self._write)

    def fileno(self) -> int:
        return self._read

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # full: it rings already; closed: nobody listens
            os.write(self._write, b"\0")

    def clear(self) -> None:
        super().clear()
        with contextlib.suppress(OSError):
            while os.read(self._read, 4096):
                pass



def _close_all(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class ChangeWatcher:
    """`wait` returns when another connection commits. With `wakeups_only`, only for the
    commits that move the wake-up counter (migration 15: a card became ready, was cancelled
    or settled as a child; spawning paused or resumed), which is all a dispatcher acts on:
    a board's other traffic (heartbeats, transcripts, comments) costs it nothing: on Linux
    it sleeps on the wake-up file, which only those commits touch (by kanban's writers: anyone
    else's are found by the caller's tick)."""

    def __init__(self, path: Path | None, *, poll_s: float = 0.005,
                 wakeups_only: bool = False) -> None:
        self.poll_s = poll_s if path is not None else 0.25
        self._conn = sqlite3.connect(path, check_same_thread=False) if path else None
        self._notify: Inotify | None = None
        self._wakefile: tuple[Path, int] | None = None  # the wake-up file and its inode
        if path is not None and sys.platform == "linux":
            with contextlib.suppress(OSError):
                self._notify = self._watch_wakefile(wakefile_path(path)) if wakeups_only else None
            with contextlib.suppress(OSError):
                self._notify = self._notify or Inotify(path.parent, _MASK)
        self._wakeups_only = wakeups_only
        self._last = self._version()
        self._last_wakeup = self._wakeup()

    def _watch_wakefile(self, path: Path, notify: Inotify | None = None) -> Inotify:
        """Watch the wake-up file (made if missing); OSError where that cannot be."""
        fd = open_wakefile(path, os.O_RDONLY)
        try:
            inode = os.fstat(fd).st_ino
            if notify is None:
                notify = Inotify(path, _WAKEFILE_MASK)
            else:
                notify.watch(path, _WAKEFILE_MASK)
        finally:
            os.close(fd)
        self._wakefile = (path, inode)
        return notify

    def _rewatch(self) -> None:
        """After a ring: a wake-up file deleted or replaced is watched again (its new inode)."""
        if self._wakefile is None or self._notify is None:
            return
        path, inode = self._wakefile
        with contextlib.suppress(OSError):
            if os.stat(path, follow_symlinks=False).st_ino == inode:
                return
        with contextlib.suppress(OSError):
            self._watch_wakefile(path, self._notify)

    def _version(self) -> int:
        if self._conn is None:
            return 0
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _wakeup(self) -> int | None:
        """The wake-up counter (None: every commit counts)."""
        if self._conn is None or not self._wakeups_only:
            return None
        try:
            return int(self._conn.execute(
                "SELECT coalesce(max(seq), 0) FROM wakeup").fetchone()[0])
        except sqlite3.OperationalError:  # no such table: a board this code cannot read
            return None

    def _look(self) -> tuple[bool, bool]:
        """(a commit landed since the last look, and it matters): data_version moved, and
        with `wakeups_only` the counter too."""
        version = self._version()
        if version == self._last:
            return False, False
        self._last = version
        wakeup = self._wakeup()
        if wakeup is not None and wakeup == self._last_wakeup:
            return True, False
        self._last_wakeup = wakeup
        return True, True

    def wait(self, timeout: float, event: threading.Event) -> bool:
        """Block until the data changes, `event` is set, or `timeout`; True if data changed."""
        deadline = time.monotonic() + timeout
        settle = 0
        while True:
            landed, matters = self._look()
            if matters:
                return True
            if landed:
                settle = 0  # the commit a file event announced is visible: no need to look
            remaining = deadline - time.monotonic()
            if remaining <= 0 or event.is_set():
                return False
            if self._notify is not None and self._wakefile is not None:
                # Rung after the commit: visible at the next look, nothing to wait out.
                bell = (event.fileno(),) if isinstance(event, Doorbell) else ()
                pause = remaining if bell else EVENT_CHECK_S
                if self._notify.wait(min(pause, remaining), *bell):
                    self._rewatch()
            elif self._notify is not None:
                # SQLite writes the WAL file a moment before the commit is visible in the
                # wal-index (which raises no file event): after a wake-up that shows no
                # change yet, look again shortly rather than sleeping the full interval.
                bell = (event.fileno(),) if isinstance(event, Doorbell) else ()
                pause = (SETTLE_S * 2 ** (SETTLE_CHECKS - settle) if settle
                         else remaining if bell else EVENT_CHECK_S)
                settle = SETTLE_CHECKS if self._notify.wait(min(pause, remaining), *bell) \
                    else max(0, settle - 1)
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


class PollWatcher:
    """PostgreSQL reached only through a transaction pooler, with no direct URL to LISTEN
    on (KANBAN_DB_LISTEN), or by a worker: no notifications; the caller looks at the board
    every time its wait ends (at the latest every POLL_S, and at once when `event` is set)."""

    POLL_S = 1.0

    def wait(self, timeout: float, event: threading.Event) -> bool:
        event.wait(min(timeout, self.POLL_S))
        return True

    def close(self) -> None:
        pass


def change_watcher(db: Database, *, poll_s: float = 0.005,
                   wakeups_only: bool = False) -> ChangeWatcher | NotifyWatcher | PollWatcher:
    """The watcher for this store: data_version and inotify on SQLite, LISTEN on PostgreSQL
    (whose notifications are the wake-ups already), polling behind a pooler alone."""
    if db.dialect == "postgresql":
        # A worker (a lead waiting on its children) holds no connection while it waits.
        if db.quiet_worker or db.listening_url() is None:  # type: ignore[attr-defined]
            return PollWatcher()
        return NotifyWatcher(db)
    return ChangeWatcher(db.path, poll_s=poll_s, wakeups_only=wakeups_only)
