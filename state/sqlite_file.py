"""The SQLite board's file: its address for `sqlite3.connect`, its creation, and how a
datetime is stored in it (registered with sqlite3 on import)."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

BUSY_TIMEOUT_MS = 30_000


def sqlite_target(path: Path, vfs: str | None, mode: str | None = None) -> str:
    """What sqlite3.connect opens: the path, or a URI naming the VFS (and mode)."""
    if vfs is None and mode is None:
        return str(path)
    query = "&".join(f"{k}={v}" for k, v in (("vfs", vfs), ("mode", mode)) if v)
    return f"{path.absolute().as_uri()}?{query}"


def _time_text(value: datetime) -> str:
    """Aware datetimes stored as fixed-width UTC text: lexical order is time order."""
    if value.tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


sqlite3.register_adapter(datetime, _time_text)


def create_file(path: Path) -> None:
    """Create the database file (and every folder it needs) private to this user."""
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for folder in reversed(missing):  # mkdir(parents=True) would give the parents 0755
        folder.mkdir(exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    # Before the first page is written: freed pages can go back to the file system in
    # small steps (`kanban gc`), instead of only a whole-file VACUUM.
    raw = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        raw.execute("PRAGMA auto_vacuum = INCREMENTAL")  # a no-op once tables exist
    finally:  # the journal is chosen by the first connection (SQLiteDatabase._journal)
        raw.close()
