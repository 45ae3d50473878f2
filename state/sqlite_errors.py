"""What an SQLite error means for kanban: a busy lock, a fault of the host (read-only file,
full disk, I/O, a removed `-wal`) that may pass, or corruption that will not.

SQLite's result codes decide, not the message text where a code is available: a busy
database or a full disk is worth another try (TransientDatabaseError); a corrupt page is
not, and whoever meets one must stop writing (CorruptDatabaseError).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kanban.state.errors import CorruptDatabaseError, DatabaseError, TransientDatabaseError

# Primary result codes (the low byte of an extended code).
SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_IOERR = 5, 6, 8, 10
SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_NOTADB = 11, 13, 14, 26

BUSY = "busy"
READ_ONLY = "read_only"
FULL = "full"
IO = "io"
WAL_MISSING = "wal_missing"


def primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_busy(exc: sqlite3.Error) -> bool:
    code = primary_code(exc)
    if code is not None:
        return code in (SQLITE_BUSY, SQLITE_LOCKED)
    text = str(exc)
    return "database is locked" in text or "database table is locked" in text


def translate(path: Path | None, exc: sqlite3.Error) -> DatabaseError:
    """The kanban error for a driver error, with a one-line message saying what happened."""
    where = f" ({path})" if path else ""
    text = str(exc)
    code = primary_code(exc)
    if is_busy(exc):
        return TransientDatabaseError(
            f"the database is busy{where}: another process held its write lock too long",
            kind=BUSY)
    if code in (SQLITE_CORRUPT, SQLITE_NOTADB) or "malformed" in text or \
            "file is not a database" in text:
        if _wal_removed(path):
            return _wal_error(path, where)
        return CorruptDatabaseError(
            f"the database file is corrupt or not a kanban database{where}: {text}; stop "
            "writing to it and run `kanban check` (restore from a backup if it fails)")
    if code == SQLITE_FULL or "database or disk is full" in text:
        return TransientDatabaseError(f"the disk holding the database is full{where}", kind=FULL)
    if code == SQLITE_READONLY or "readonly" in text or "read-only" in text:
        if _wal_removed(path):
            return _wal_error(path, where)
        return TransientDatabaseError(
            f"the database is read-only{where}: check the permissions and attributes of the "
            "file and its folder", kind=READ_ONLY)
    if code == SQLITE_IOERR or "disk I/O error" in text:
        if _wal_removed(path):
            return _wal_error(path, where)
        return TransientDatabaseError(f"disk I/O error on the database{where}: {text}",
                                      kind=IO)
    if code == SQLITE_CANTOPEN or "unable to open" in text:
        return TransientDatabaseError(f"cannot open the database{where}: {text}", kind=IO)
    return DatabaseError(f"database error{where}: {text}")


def _wal_removed(path: Path | None) -> bool:
    """The shared-memory index is there but its write-ahead log is not: someone deleted
    the `-wal` file while the database was in use."""
    if path is None:
        return False
    return Path(f"{path}-shm").exists() and not Path(f"{path}-wal").exists()


def _wal_error(path: Path | None, where: str) -> TransientDatabaseError:
    return TransientDatabaseError(
        f"the database's write-ahead log ({path}-wal) was removed while in use{where}: "
        "stop every kanban process using it, then start them again (the last committed "
        "changes may be lost)", kind=WAL_MISSING)


def describe_error(path: Path | None, exc: sqlite3.Error) -> str:
    return translate(path, exc).message
