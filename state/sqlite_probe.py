"""The write probe: can a new process write the board? Run by a fresh interpreter, since
within one process SQLite reuses the file descriptors of closed connections, so a probe
there could still write where a new worker cannot (an immutable file opens read-only
elsewhere)."""

from __future__ import annotations

import sqlite3
import sys

from kanban.state.errors import TransientDatabaseError
from kanban.state.sqlite_errors import IO, WAL_MISSING
from kanban.state.store import PROBE_DELETE, PROBE_INSERT, PROBE_KEY

# Prints "code<TAB>message" on failure.
_PROBE = f"""
import sqlite3, sys
from pathlib import Path
from kanban.state.errors import TransientDatabaseError
from kanban.state.wal_guard import before_connect, check_connection
try:
    before = before_connect(Path(sys.argv[1]))
    c = sqlite3.connect(sys.argv[1], timeout=float(sys.argv[3]), isolation_level=None)
    c.execute("PRAGMA journal_mode").fetchone()
    check_connection(Path(sys.argv[1]), before)
    c.execute("BEGIN IMMEDIATE")
    c.execute({PROBE_INSERT!r}, {{"key": sys.argv[2]}})
    c.execute({PROBE_DELETE!r}, {{"key": sys.argv[2]}})
    c.execute("COMMIT")
except sqlite3.Error as e:
    print(f"{{getattr(e, 'sqlite_errorcode', '')}}\t{{e}}")
    sys.exit(1)
except TransientDatabaseError as e:
    print(f"wal\t{{e.message}}")
    sys.exit(1)
"""


def write_elsewhere(path: str, patience_s: float, slice_s: float) -> sqlite3.Error | None:
    """None if a fresh process wrote (and removed) the probe row; else SQLite's error as it
    saw it, for the caller to translate. A missing write-ahead log or a probe that could
    not run raises TransientDatabaseError. SQLite's own busy handler waits `slice_s`."""
    import subprocess  # here: rarely needed, and every command imports this module

    try:
        done = subprocess.run([sys.executable, "-I", "-c", _PROBE, path, PROBE_KEY,
                               str(slice_s)],
                              capture_output=True, text=True, timeout=max(5.0, patience_s + 2))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TransientDatabaseError(f"cannot probe the database ({path}): {exc}",
                                     kind=IO) from None
    if done.returncode == 0:
        return None
    code, _, text = done.stdout.strip().partition("\t")
    if code == "wal":
        raise TransientDatabaseError(text, kind=WAL_MISSING)
    error = sqlite3.OperationalError(text or done.stderr.strip()[-300:] or "probe failed")
    if code.isdigit():
        error.sqlite_errorcode = int(code)
    return error
