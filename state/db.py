"""Open a kanban database: create it where allowed, check its version, migrate."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import kanban.state.wal_guard as wal_guard
from kanban.state.errors import DatabaseError
from kanban.state.journal import no_shared_memory
from kanban.state.migrations import check_version, migrate
from kanban.state.paths import DbLocation
from kanban.state.sqlite import SQLiteDatabase, create_file, sqlite_target
from kanban.state.sqlite_errors import translate
from kanban.state.store import Database


def open_database(
    location: DbLocation, *, create: bool = False, synchronous: str = "NORMAL",
    journal: str = "auto", vfs: str | None = None,
) -> Database:
    """A ready-to-use database; `create` allows a new file (as `kanban init` does), with
    the rollback journal when `journal` says so (SQLite; see kanban.state.journal).
    `vfs`: the SQLite VFS to open the file through (tests: a filesystem without shared
    memory)."""
    if location.is_postgres:
        from kanban.state.postgres import PostgresDatabase

        db: Database = PostgresDatabase(location.target)
    else:
        db = _open_sqlite(location, create=create, synchronous=synchronous, journal=journal,
                          vfs=vfs)
    try:
        migrate(db)
        if isinstance(db, SQLiteDatabase) and create:
            db.keep_journal()
    except BaseException:
        db.dispose()
        raise
    return db


def _open_sqlite(location: DbLocation, *, create: bool, synchronous: str,
                 journal: str, vfs: str | None) -> Database:
    path = location.path
    if path.is_dir():
        raise DatabaseError(f"{path} is a directory, not a database file")
    if not path.exists():
        if not create:
            raise DatabaseError(missing_database(location))
        try:
            create_file(path)
        except OSError as exc:
            raise DatabaseError(f"cannot create database at {path}: {exc.strerror}") from None
    elif path.stat().st_size:
        _check_before_use(path, vfs)
    return SQLiteDatabase(path, synchronous=synchronous, journal=journal, vfs=vfs)


def missing_database(location: DbLocation) -> str:
    """What to say when there is no database: where we looked and how to make one."""
    if location.source == "user":
        return ("no kanban database found (no .kanban/kanban.db here or in a parent folder, "
                f"KANBAN_DB unset, none at {location.path}): run `kanban init` to create "
                "one here, or pass --db PATH")
    if location.source == "project":
        return f"no kanban database at {location.path}: run `kanban init` in {location.home.parent}"
    given = "--db" if location.source == "flag" else "KANBAN_DB"
    return (f"no kanban database at {location.path} (from {given}): create it with "
            f"`kanban --db {location.path} init`")


def _check_before_use(path: Path, vfs: str | None) -> None:
    """Refuse a foreign, corrupt or newer file over a read-only connection, before the
    first ordinary connection switches it to WAL (which rewrites its header)."""
    before = wal_guard.before_connect(path)  # a removed -wal: wait for it to be back
    # A rollback journal left by a killed writer must be rolled back before anyone reads,
    # which a read-only connection cannot do (a plain one does not touch the journal mode).
    mode = "rw" if Path(f"{path}-journal").exists() else "ro"
    try:
        conn = sqlite3.connect(sqlite_target(path, vfs, mode), uri=True)
    except sqlite3.Error as exc:
        raise translate(path, exc) from None
    try:
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        wal_guard.check_connection(path, before)
        version = 0 if not tables else None
        if "schema_migration" in tables:
            version = conn.execute("SELECT coalesce(max(id), 0) FROM schema_migration"
                                   ).fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and no_shared_memory(exc):
            return  # a WAL file this VFS cannot read: the first connection leaves WAL, and
            # the migrations check the version
        raise translate(path, exc) from None
    finally:
        conn.close()
    check_version(version, str(path))
