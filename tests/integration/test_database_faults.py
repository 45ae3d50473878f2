"""What the SQLite store says and does when the file is busy, read-only or corrupt."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from kanban.state import DbLocation, open_database
from kanban.state.errors import CorruptDatabaseError, TransientDatabaseError
from kanban.state.sqlite import SQLiteDatabase
from kanban.state.sqlite_errors import BUSY, translate


def open_sqlite(path: Path) -> SQLiteDatabase:
    db = open_database(DbLocation(str(path), "flag"), create=True)
    assert isinstance(db, SQLiteDatabase)
    return db


def hold_write_lock(path: Path, seconds: float) -> threading.Thread:
    taken = threading.Event()

    def hold() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        taken.set()
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait()
    return thread


def test_a_write_waits_out_a_lock_longer_than_one_busy_slice(tmp_path: Path) -> None:
    db = open_sqlite(tmp_path / "kanban.db")
    try:
        db.patience_s = 5.0
        holder = hold_write_lock(db.path, 1.5)  # longer than SQLite's own handler waits
        with db.write() as conn:
            conn.execute("INSERT INTO setting (key, value) VALUES ('k', 'v')")
        holder.join()
        with db.read() as conn:
            assert conn.scalar("SELECT value FROM setting WHERE key = 'k'") == "v"
    finally:
        db.dispose()


def test_a_lock_held_past_patience_is_one_transient_busy_error(tmp_path: Path) -> None:
    db = open_sqlite(tmp_path / "kanban.db")
    try:
        db.patience_s = 0.3
        holder = hold_write_lock(db.path, 1.5)
        started = time.monotonic()
        with pytest.raises(TransientDatabaseError) as caught, db.write():
            pytest.fail("the body must not run without the lock")
        assert time.monotonic() - started < 1.4
        holder.join()
        assert caught.value.kind == BUSY and not caught.value.in_doubt
        assert "\n" not in caught.value.message
        assert "the database is busy" in caught.value.message
        with db.write() as conn:  # and the store is fine afterwards
            conn.execute("INSERT INTO setting (key, value) VALUES ('k', 'v')")
    finally:
        db.dispose()


def test_corruption_stops_every_later_write(tmp_path: Path) -> None:
    db = open_sqlite(tmp_path / "kanban.db")
    try:
        error = db._translate(sqlite3.DatabaseError("database disk image is malformed"))
        assert isinstance(error, CorruptDatabaseError)
        assert "kanban check" in error.message
        with pytest.raises(CorruptDatabaseError, match="kanban check"), db.write():
            pass
        with db.read() as conn:  # reading what is left is still allowed
            assert conn.scalar("SELECT 1") == 1
    finally:
        db.dispose()


@pytest.mark.parametrize(("text", "says"), [
    ("database or disk is full", "the disk holding the database is full"),
    ("attempt to write a readonly database", "the database is read-only"),
    ("disk I/O error", "disk I/O error"),
    ("database is locked", "the database is busy"),
])
def test_host_faults_are_transient_with_their_own_message(tmp_path: Path, text: str,
                                                          says: str) -> None:
    error = translate(tmp_path / "kanban.db", sqlite3.OperationalError(text))
    assert isinstance(error, TransientDatabaseError)
    assert error.message.startswith(says)


def test_a_removed_wal_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "kanban.db"
    Path(f"{path}-shm").write_bytes(b"")
    error = translate(path, sqlite3.OperationalError("disk I/O error"))
    assert isinstance(error, TransientDatabaseError)
    assert "write-ahead log" in error.message and "was removed" in error.message
