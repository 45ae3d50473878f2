"""Waking the dispatcher when the database changes, without busy work."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path


class ChangeWatcher:
    """Polls `PRAGMA data_version` (a read of shared memory, no I/O) between waits.

    Any commit by another connection changes it, so a new card wakes the
    dispatcher within one poll interval.
    """

    def __init__(self, path: Path | None, *, poll_s: float = 0.005) -> None:
        self.poll_s = poll_s if path is not None else 0.25
        self._conn = sqlite3.connect(path, check_same_thread=False) if path else None
        self._last = self._version()

    def _version(self) -> int:
        if self._conn is None:
            return 0
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def wait(self, timeout: float, event: threading.Event) -> bool:
        """Block until the data changes, `event` is set, or `timeout`; True if data changed."""
        deadline = time.monotonic() + timeout
        while True:
            version = self._version()
            if version != self._last:
                self._last = version
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or event.wait(min(self.poll_s, remaining)):
                return self._conn is None and remaining > 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
