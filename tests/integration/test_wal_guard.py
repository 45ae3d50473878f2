"""A `-wal` file deleted while the database is in use: the guard a dispatcher holds puts
the same log back, and a connection opened in between is refused instead of starting a
second log (which would lose or corrupt what the first one holds)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kanban.state import DbLocation, open_database
from kanban.state.errors import TransientDatabaseError
from kanban.state.sqlite import SQLiteDatabase
from kanban.state.sqlite_errors import WAL_MISSING
from kanban.state.wal_guard import WalGuard, live_guards
from tests.support.pg import skip_or_fail


@pytest.fixture(autouse=True)
def _proc() -> None:
    """The guard reads /proc/self/fd (Linux); elsewhere skip, but fail under CI=true."""
    if not Path("/proc/self/fd").is_dir():
        skip_or_fail("needs /proc/self/fd")


@pytest.fixture
def db(tmp_path: Path) -> SQLiteDatabase:
    opened = open_database(DbLocation(str(tmp_path / "k.db"), "flag"), create=True)
    assert isinstance(opened, SQLiteDatabase)
    with opened.write() as conn:
        conn.run("CREATE TABLE note (n INTEGER)")
    return opened


def count(db: SQLiteDatabase) -> int:
    with db.read() as conn:
        return int(conn.scalar("SELECT count(*) FROM note"))


def add(db: SQLiteDatabase, n: int) -> None:
    with db.write() as conn:
        conn.run("INSERT INTO note (n) VALUES (:n)", {"n": n})


def test_a_removed_log_is_put_back_with_every_commit(db: SQLiteDatabase) -> None:
    guard = WalGuard(db.path, poll_s=3600, watch_files=False).start()  # checked by hand
    try:
        for n in range(50):
            add(db, n)  # committed into the log, not yet into the database file
        wal = Path(f"{db.path}-wal")
        inode = wal.stat().st_ino
        wal.unlink()
        add(db, 50)  # a process that had the log open keeps writing into it

        newcomer = SQLiteDatabase(db.path)
        with pytest.raises(TransientDatabaseError) as refused:
            add(newcomer, 99)
        assert refused.value.kind == WAL_MISSING
        assert "write-ahead log" in refused.value.message

        guard.check()
        assert wal.stat().st_ino == inode
        assert [kind for kind, _ in guard.take_notes()] == ["restored"]
        add(newcomer, 51)
        assert count(newcomer) == count(db) == 52
        newcomer.dispose()
    finally:
        guard.stop()
    db.dispose()
    check = SQLiteDatabase(db.path)
    with check.read() as conn:
        assert conn.scalar("PRAGMA integrity_check") == "ok"
        assert conn.scalar("SELECT count(*) FROM note") == 52
    check.dispose()


def test_the_watching_thread_puts_the_log_back(db: SQLiteDatabase) -> None:
    from tests.support.procs import wait_until

    guard = WalGuard(db.path, poll_s=3600).start()  # woken by the file's removal
    try:
        add(db, 1)
        wal = Path(f"{db.path}-wal")
        inode = wal.stat().st_ino
        wal.unlink()
        wait_until(lambda: wal.exists() and wal.stat().st_ino == inode, timeout=10,
                   what="the log put back")
        assert count(SQLiteDatabase(db.path)) == 1
    finally:
        guard.stop()
    assert live_guards(db.path) == set()  # its link went with it
    db.dispose()


def test_a_dead_guards_link_is_ignored_and_swept(db: SQLiteDatabase) -> None:
    add(db, 1)
    dead = db.path.parent / f".{db.path.name}.walguard.{2**22 + 7}.12345"
    os.link(f"{db.path}-wal", dead)
    assert live_guards(db.path) == set()
    guard = WalGuard(db.path, poll_s=3600).start()
    try:
        assert not dead.exists()
        assert len(live_guards(db.path)) == 1
    finally:
        guard.stop()
    db.dispose()
