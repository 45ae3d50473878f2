"""The SQLite store: WAL, pragmas, `BEGIN IMMEDIATE` for every write, a connection per thread.

A thread keeps its connection and issues BEGIN [IMMEDIATE] / COMMIT / ROLLBACK itself.
Nested use on one thread (a read inside a write) gets a short-lived connection; a
connection that saw an error is discarded; a forked child forgets what its parent held.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from kanban.state.errors import DatabaseError
from kanban.state.store import Conn, Database
from kanban.state.timeutil import utcnow

BUSY_TIMEOUT_MS = 30_000


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


class SQLiteDatabase(Database):
    dialect = "sqlite"
    clock = staticmethod(utcnow)  # the writing process's clock, at no cost

    def __init__(self, path: Path, *, synchronous: str = "NORMAL") -> None:
        if synchronous.upper() not in {"NORMAL", "FULL"}:
            raise DatabaseError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        self.path = path
        self.file: Path = path  # never None here (the base class allows None)
        self.synchronous = synchronous.upper()
        self._local = threading.local()
        self._all: set[sqlite3.Connection] = set()
        self._lock = threading.Lock()
        ref = weakref.ref(self)

        def forget_in_child() -> None:
            db = ref()
            if db is not None:
                db._forget()

        os.register_at_fork(after_in_child=forget_in_child)

    @property
    def target(self) -> str:
        return str(self.path)

    def connect(self) -> sqlite3.Connection:
        """A new connection with the pragmas every kanban connection runs with."""
        raw = sqlite3.connect(self.file, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                              check_same_thread=False, cached_statements=256)
        try:
            raw.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            raw.execute("PRAGMA journal_mode = WAL")
            raw.execute(f"PRAGMA synchronous = {self.synchronous}")
            raw.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error:
            raw.close()
            raise
        return raw

    def _forget(self) -> None:
        """In a forked child: never touch the parent's connections."""
        self._local = threading.local()
        self._all = set()
        self._lock = threading.Lock()

    @contextmanager
    def write(self) -> Iterator[Conn]:
        with self._transaction("BEGIN IMMEDIATE") as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Conn]:
        with self._transaction("BEGIN") as conn:
            yield conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[Conn]:
        local = self._local
        nested = getattr(local, "busy", False)
        raw = None
        try:
            raw = self.connect() if nested else self._held()
            if not nested:
                local.busy = True
            raw.execute(begin)
            try:
                yield Conn(raw, "sqlite")
            except BaseException:
                self._rollback(raw, nested)
                raise
            raw.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if raw is not None:
                self._rollback(raw, nested)
                self._discard(raw, nested)
            if isinstance(exc, sqlite3.IntegrityError):
                raise  # a programming error, not the database's state
            raise DatabaseError(describe_error(self.path, exc)) from exc
        finally:
            if nested and raw is not None:
                raw.close()
            elif not nested:
                local.busy = False

    def _rollback(self, raw: sqlite3.Connection, nested: bool) -> None:
        try:
            if raw.in_transaction:
                raw.execute("ROLLBACK")
        except sqlite3.Error:
            self._discard(raw, nested)

    def _held(self) -> sqlite3.Connection:
        raw = getattr(self._local, "conn", None)
        if raw is None:
            raw = self.connect()
            self._local.conn = raw
            with self._lock:
                self._all.add(raw)
        return raw

    def _discard(self, raw: sqlite3.Connection, nested: bool) -> None:
        if not nested and getattr(self._local, "conn", None) is raw:
            self._local.conn = None
            with self._lock:
                self._all.discard(raw)
        with suppress(Exception):
            raw.close()

    def data_version(self, conn: Conn) -> int:
        return int(conn.scalar("PRAGMA data_version"))

    def dispose(self) -> None:
        with self._lock:
            held, self._all = self._all, set()
        for raw in held:
            with suppress(Exception):
                raw.close()
        self._local = threading.local()


def describe_error(path: Path | None, exc: sqlite3.DatabaseError) -> str:
    text = str(exc)
    where = f" ({path})" if path else ""
    if "file is not a database" in text or "malformed" in text:
        return f"the database file is corrupt or not a kanban database{where}: {text}"
    if "readonly" in text or "read-only" in text:
        return f"the database is read-only{where}"
    if "unable to open" in text:
        return f"cannot open the database{where}: {text}"
    return f"database error{where}: {text}"
