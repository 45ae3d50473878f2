"""The store boundary: a database hands out transactions; a `Conn` runs SQL in one.

The board logic above writes plain SQL with `:name` parameters and runs it through a
`Conn`. Two stores implement `Database`: SQLite (the standard library's driver, one
connection held per thread) and PostgreSQL (psycopg). Nothing here imports SQLAlchemy:
the command line starts in tens of milliseconds because of it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from kanban.state.timeutil import utcnow

Params = Mapping[str, Any] | Sequence[Any] | None

PROBE_KEY = "write-probe"
PROBE_INSERT = "INSERT INTO setting (key, value) VALUES (:key, 'probe')"
PROBE_DELETE = "DELETE FROM setting WHERE key = :key"

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@lru_cache(maxsize=1024)
def pyformat(sql: str) -> str:
    """`:name` parameters as psycopg's `%(name)s` (and a literal % doubled)."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


def _same(sql: str) -> str:
    return sql


class Conn:
    """One transaction's connection. Rows are tuples; `maps` gives them by column name."""

    __slots__ = ("raw", "dialect", "_sql")

    def __init__(self, raw: Any, dialect: str) -> None:
        self.raw = raw
        self.dialect = dialect
        self._sql = pyformat if dialect == "postgresql" else _same

    def execute(self, sql: str, params: Params = None) -> Any:
        """Run one statement; returns the driver's cursor."""
        return self.raw.execute(self._sql(sql), params if params is not None else ())

    def many(self, sql: str, rows: Iterable[Params]) -> None:
        """Run one statement for each parameter set (bulk inserts)."""
        if self.dialect == "postgresql":
            with self.raw.cursor() as cursor:
                cursor.executemany(self._sql(sql), list(rows))
        else:
            self.raw.executemany(sql, rows)

    def one(self, sql: str, params: Params = None) -> Any:
        return self.execute(sql, params).fetchone()

    def all(self, sql: str, params: Params = None) -> list[Any]:
        return self.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Params = None) -> Any:
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def column(self, sql: str, params: Params = None) -> list[Any]:
        return [row[0] for row in self.execute(sql, params).fetchall()]

    def run(self, sql: str, params: Params = None) -> int:
        """Execute and return the number of rows changed."""
        return int(self.execute(sql, params).rowcount)

    def maps(self, sql: str, params: Params = None) -> list[dict[str, Any]]:
        cursor = self.execute(sql, params)
        rows = cursor.fetchall()
        names = self._names(cursor)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def map(self, sql: str, params: Params = None) -> dict[str, Any] | None:
        cursor = self.execute(sql, params)
        row = cursor.fetchone()
        if row is None:
            return None
        return dict(zip(self._names(cursor), row, strict=True))

    def _names(self, cursor: Any) -> list[str]:
        """The result's column names. psycopg's `description` builds an object per column
        with its type's details, a third of a completion's client time for the card's 45
        columns; the names alone are in the result."""
        if self.dialect == "postgresql":
            result = cursor.pgresult
            return [result.fname(i).decode() for i in range(result.nfields)]
        return [d[0] for d in cursor.description]


class FileGuard(Protocol):
    def take_notes(self) -> list[tuple[str, str]]: ...

    def stop(self) -> None: ...


class Database:
    """A store: read and write transactions over one database."""

    dialect: str = ""
    path: Path | None = None
    patience_s: float = 0.0  # how long a transaction waits for an unreachable server
    # A worker on this store reads only to renew its lease or store what it must (its
    # dispatcher stops it by signal when its card is cancelled): set by `for_worker`.
    quiet_worker: bool = False

    @property
    def target(self) -> str:
        """What KANBAN_DB would say: the file path or the URL."""
        raise NotImplementedError

    @property
    def display(self) -> str:
        """The target fit to print (no password)."""
        return self.target

    def write(self) -> AbstractContextManager[Conn]:
        """A write transaction (`BEGIN IMMEDIATE` on SQLite), committed on success."""
        raise NotImplementedError

    def read(self) -> AbstractContextManager[Conn]:
        """A consistent read snapshot that never takes the write lock."""
        raise NotImplementedError

    def statement(self) -> AbstractContextManager[Conn]:
        """A connection for one self-contained statement (PostgreSQL runs it without
        BEGIN/COMMIT); elsewhere an ordinary write transaction."""
        return self.write()

    def write_one(self, sql: str, params: Params = None) -> int:
        """One self-contained write statement, atomic on its own; the rows it changed.
        SQLite runs it in autocommit, so its write lock is held inside that one statement,
        never while Python code runs between BEGIN and COMMIT."""
        with self.statement() as conn:
            return conn.run(sql, params)

    def probe_write(self) -> None:
        """A small real write, undone in the same transaction, as a newly started process
        would make it: proof that workers can use the database again."""
        with self.write() as conn:
            conn.run(PROBE_INSERT, {"key": PROBE_KEY})
            conn.run(PROBE_DELETE, {"key": PROBE_KEY})

    def clock(self) -> datetime:
        """Now, as this store records it: the process's clock (PostgreSQL: the server's)."""
        return utcnow()

    def journal_mode(self) -> str | None:
        """SQLite's journal in force ("wal" or "rollback"); None for other stores."""
        return None

    def journal_warning(self) -> str | None:
        """One line when the store runs without what it normally relies on (SQLite: the
        rollback journal instead of WAL), else None."""
        return None

    def guard(self, wake: threading.Event | None = None) -> FileGuard | None:
        """For a long-running process: something that keeps the store's files safe while
        it runs (SQLite: its write-ahead log), or None where nothing needs it."""
        return None

    def data_version(self, conn: Conn) -> int:
        """A number that moves when another connection commits (0 where unknown)."""
        return 0

    def for_worker(self, slots: str | None) -> None:
        """Fit this store to a worker process, which mostly waits on its model or commands;
        `slots` is what its dispatcher handed it to share connections (KANBAN_DB_SLOTS)."""

    def dispose(self) -> None:
        """Close every connection this process holds."""
