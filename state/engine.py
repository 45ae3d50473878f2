"""Engines and transactions: WAL, pragmas, and `BEGIN IMMEDIATE` for every write."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DatabaseError as SADatabaseError
from sqlalchemy.exc import OperationalError

from state.errors import DatabaseError
from state.held import MANUAL, HeldConnections

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

BUSY_TIMEOUT_MS = 30_000
_READ = "kanban_read"


def _sqlite_pragmas(dbapi_conn: Any, synchronous: str) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA journal_mode = WAL")
    cur.execute(f"PRAGMA synchronous = {synchronous}")
    cur.execute("PRAGMA foreign_keys = ON")
    cur.close()


def _install_sqlite_listeners(engine: Engine, synchronous: str) -> None:
    """Take transaction control from pysqlite so every write begins IMMEDIATE."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # aiosqlite wraps the sqlite3 connection; both expose isolation_level.
        dbapi_conn.isolation_level = None
        _sqlite_pragmas(dbapi_conn, synchronous)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get(MANUAL):  # a held connection: state.held begins on the driver
            return
        read = options.get(_READ, False)
        # Straight to the driver: this runs for every transaction.
        conn.connection.dbapi_connection.execute(  # type: ignore[union-attr]
            "BEGIN" if read else "BEGIN IMMEDIATE")


def create_file(path: Path) -> None:
    """Create the database file (and its folder) private to this user."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)


def sqlite_engine(path: Path, *, synchronous: str = "NORMAL") -> Engine:
    if synchronous.upper() not in {"NORMAL", "FULL"}:
        raise DatabaseError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
    )
    _install_sqlite_listeners(engine, synchronous.upper())
    return engine


def sqlite_async_engine(path: Path, *, synchronous: str = "NORMAL") -> AsyncEngine:
    """The same setup for asyncio embedders (aiosqlite)."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(
        f"sqlite+aiosqlite:///{path}", connect_args={"timeout": BUSY_TIMEOUT_MS / 1000}
    )
    _install_sqlite_listeners(engine.sync_engine, synchronous.upper())
    return engine


def _mirror_partial_indexes() -> None:
    """Partial indexes declare their WHERE once, for SQLite; PostgreSQL gets the same
    clause here, so SQLite users never import the PostgreSQL dialect at start-up."""
    from sqlmodel import SQLModel

    import state.models  # noqa: F401 - registers the tables

    for table in SQLModel.metadata.tables.values():
        for index in table.indexes:
            where = index.dialect_options["sqlite"]["where"]
            if where is not None:
                index.dialect_kwargs["postgresql_where"] = where


def postgres_engine(url: str) -> Engine:
    _mirror_partial_indexes()
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            url = "postgresql+psycopg://" + url.removeprefix(scheme)
    return create_engine(url, pool_pre_ping=True)


class Database:
    """One database: its engine plus read and write transactions."""

    def __init__(self, engine: Engine, *, path: Path | None = None) -> None:
        self.engine = engine
        self.path = path
        self.dialect = engine.dialect.name
        self._held = HeldConnections(engine) if self.dialect == "sqlite" else None

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (`BEGIN IMMEDIATE` on SQLite), committed on success."""
        with _translate_errors(self):
            if self._held is not None:
                with self._held.transaction("BEGIN IMMEDIATE") as held:
                    if held is not None:
                        yield held
                        return
            with self.engine.connect() as conn, conn.begin():
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A consistent read snapshot that never takes the write lock."""
        with _translate_errors(self):
            if self._held is not None:
                with self._held.transaction("BEGIN") as held:
                    if held is not None:
                        yield held
                        return
            with (
                self.engine.connect().execution_options(**{_READ: True}) as conn,
                conn.begin(),
            ):
                yield conn

    def data_version(self, conn: Connection) -> int:
        """Changes whenever another connection commits (SQLite); cheap to poll."""
        return int(conn.exec_driver_sql("PRAGMA data_version").scalar_one())

    def dispose(self) -> None:
        if self._held is not None:
            self._held.close_all()
        self.engine.dispose()


@contextmanager
def _translate_errors(db: Database) -> Iterator[None]:
    """Operational SQLite failures (through SQLAlchemy or straight from the driver on the
    hot path) become one-line DatabaseErrors; integrity errors stay programming errors."""
    try:
        yield
    except (OperationalError, SADatabaseError, sqlite3.DatabaseError) as exc:
        orig = getattr(exc, "orig", exc)
        if isinstance(orig, sqlite3.DatabaseError) and not isinstance(
            orig, sqlite3.IntegrityError
        ):
            raise DatabaseError(_describe_sqlite_error(db, orig)) from exc
        raise


def _describe_sqlite_error(db: Database, orig: sqlite3.DatabaseError) -> str:
    text = str(orig)
    where = f" ({db.path})" if db.path else ""
    if "file is not a database" in text or "malformed" in text:
        return f"the database file is corrupt or not a kanban database{where}: {text}"
    if "readonly" in text or "read-only" in text:
        return f"the database is read-only{where}"
    if "unable to open" in text:
        return f"cannot open the database{where}: {text}"
    return f"database error{where}: {text}"
