"""Waking the dispatcher when the database changes, without busy work.

Every commit by any process moves `PRAGMA data_version` (a read of shared memory).
On Linux, inotify on the database's folder wakes us when the WAL file is written,
so an idle dispatcher sleeps in select(); elsewhere it polls data_version.
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

_IN_MODIFY, _IN_CREATE, _IN_MOVED_TO = 0x2, 0x100, 0x80
EVENT_CHECK_S = 0.05  # how often a set `event` is noticed while sleeping in select()
SETTLE_CHECKS = 5  # re-checks at poll_s after a file event that showed no commit yet


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
                pause = self.poll_s if settle else EVENT_CHECK_S
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
