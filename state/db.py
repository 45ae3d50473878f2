"""Open a kanban database: create it where allowed, check its version, migrate."""

from __future__ import annotations

from state.engine import Database, create_file, postgres_engine, sqlite_engine
from state.errors import DatabaseError
from state.migrations import migrate
from state.paths import DbLocation


def open_database(
    location: DbLocation, *, create: bool = False, synchronous: str = "NORMAL"
) -> Database:
    """A ready-to-use database; `create` allows a new file (as `kanban init` does)."""
    if location.is_postgres:
        db = Database(postgres_engine(location.target))
    else:
        db = _open_sqlite(location, create=create, synchronous=synchronous)
    try:
        migrate(db)
    except BaseException:
        db.dispose()
        raise
    return db


def _open_sqlite(location: DbLocation, *, create: bool, synchronous: str) -> Database:
    path = location.path
    if path.is_dir():
        raise DatabaseError(f"{path} is a directory, not a database file")
    if not path.exists():
        if not (create or location.implicit):
            raise DatabaseError(f"no kanban database at {path} (run `kanban init` to create one)")
        try:
            create_file(path)
        except OSError as exc:
            raise DatabaseError(f"cannot create database at {path}: {exc.strerror}") from None
    return Database(sqlite_engine(path, synchronous=synchronous), path=path)
