"""The board's wake-up file: beside a SQLite board, touched by kanban's writers after a
commit that moved the wake-up counter (migration 15), so a dispatcher sleeps on it alone.

A dispatcher woken by every commit of the board (inotify on the write-ahead log) paid
about 15 µs of Python for each: 1.3% of a core beside a writer at 100 commits a second,
though comments, heartbeats and transcript turns never concern it. Here each connection
kanban opens carries TEMP triggers (its own, invisible to other connections) that note
when a statement moves the counter; after that transaction commits, the writer writes one
byte to `<board>-wake`. The dispatcher watches that one file. A commit by anything else
(the sqlite3 shell, say) does not ring: the dispatcher's one-second tick finds its work.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
from pathlib import Path

SUFFIX = "-wake"
TEMP_CACHE_PAGES = 2
_FUNCTION = "kanban_rang"
_TRIGGERS = (  # TEMP: this connection's own, and dropped with it
    f"CREATE TEMP TRIGGER IF NOT EXISTS kanban_ring_insert AFTER INSERT ON main.wakeup "
    f"BEGIN SELECT {_FUNCTION}(); END",
    f"CREATE TEMP TRIGGER IF NOT EXISTS kanban_ring_update AFTER UPDATE ON main.wakeup "
    f"BEGIN SELECT {_FUNCTION}(); END",
)


def wakefile_path(board: Path) -> Path:
    return board.with_name(board.name + SUFFIX)


class RingingConnection(sqlite3.Connection):
    """A connection that knows whether its open transaction moved the wake-up counter."""

    rang = False
    armed = False  # the triggers are in place (False before the board is migrated)

    def arm(self) -> bool:
        """Install the triggers once the `wakeup` table exists; True when they are in place.
        Outside a transaction only (CREATE on the temp schema would join the caller's)."""
        if self.armed:
            return True
        self.create_function(_FUNCTION, 0, self._hit)
        # Never wait for a lock here (a rollback-journal board's writer holds readers off
        # while it commits): the wait would come out of the caller's patience for its own
        # BEGIN. Busy now: armed at a later write; until then this connection rings nobody.
        patience = self.execute("PRAGMA busy_timeout").fetchone()[0]
        self.execute("PRAGMA busy_timeout = 0")
        try:
            # The TEMP schema holds these two triggers and nothing else: a page cache of a
            # few pages, not the 20 SQLite sets up for a database (80 KiB a connection).
            self.execute(f"PRAGMA temp.cache_size = {TEMP_CACHE_PAGES}")
            for statement in _TRIGGERS:
                self.execute(statement)
        except sqlite3.OperationalError:  # busy, or no such table yet (not migrated)
            return False
        finally:
            self.execute(f"PRAGMA busy_timeout = {int(patience)}")
        self.armed = True
        return True

    def _hit(self) -> None:
        self.rang = True

    def take(self) -> bool:
        """Whether the transaction just ended rang, forgetting it."""
        rang, self.rang = self.rang, False
        return rang


def ring(board: Path) -> None:
    """Touch the wake-up file. Never fails or blocks the commit it follows: a folder we
    cannot write to costs the dispatcher at most its tick, and whatever is planted at the
    path instead of a file (a FIFO nobody reads, a symlink) is left alone."""
    with contextlib.suppress(OSError):
        fd = open_wakefile(wakefile_path(board), os.O_WRONLY)
        try:
            os.pwrite(fd, b"\0", 0)
        finally:
            os.close(fd)


def open_wakefile(path: Path, mode: int) -> int:
    """The wake-up file's descriptor, made if missing: never through a symlink, never
    waiting (O_NONBLOCK: a FIFO would block its opener), and only a regular file."""
    fd = os.open(path, mode | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd
