"""The async store: reads for the web board that never block its event loop.

SQLite reads run on aiosqlite connections (each drives sqlite3 on a thread of its own);
PostgreSQL reads on psycopg's AsyncConnection. Both run the very plans the sync `Conn`
runs (kanban.state.plans), so no query exists twice. The async store only reads: writes
go through the sync `Database` in a worker thread, keeping BEGIN IMMEDIATE, fencing and
the event log in one place.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import kanban.state.wal_guard as wal_guard
from kanban.state.errors import DatabaseError, KanbanError, TransientDatabaseError
from kanban.state.plans import Plan, Query, Rows, column_names
from kanban.state.sqlite import BUSY_TIMEOUT_MS
from kanban.state.sqlite_errors import translate
from kanban.state.store import Database, pyformat

T = TypeVar("T")
POOL_SIZE = 4


class AsyncConn:
    """One read transaction on an async driver connection."""

    def __init__(self, owner: AsyncDatabase, raw: Any) -> None:
        self.owner = owner
        self.raw = raw

    async def rows(self, query: Query) -> Rows:
        raise NotImplementedError

    async def run(self, plan: Plan[T]) -> T:
        """Drive a plan: each query it yields is awaited, its rows sent back."""
        try:
            query = next(plan)
            while True:
                query = plan.send(await self.rows(query))
        except StopIteration as done:
            return done.value


class AsyncDatabase:
    """A small pool of async read connections over one database."""

    dialect = ""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self.queries = 0  # statements run so far: benchmarks and tests count them
        self._idle: list[Any] = []
        self._opened = 0
        self._freed: asyncio.Condition | None = None
        self._closed = False

    async def run(self, plan: Plan[T]) -> T:
        """Run a plan in one read transaction."""
        async with self.read() as conn:
            return await conn.run(plan)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConn]:
        raw = await self._acquire()
        healthy = False
        try:
            async with self._transaction(raw) as conn:
                yield conn
            healthy = True
        except KanbanError as exc:
            # a plan's own refusal (no such card) leaves the connection fine
            healthy = not isinstance(exc, DatabaseError)
            raise
        finally:
            await self._release(raw, healthy)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for raw in idle:
            with suppress(Exception):
                await self._close_raw(raw)

    # the pool
    async def _acquire(self) -> Any:
        if self._closed:
            raise DatabaseError("the database is closed")
        if self._freed is None:
            self._freed = asyncio.Condition()
        async with self._freed:
            while not self._idle and self._opened >= self.size:
                await self._freed.wait()
            if self._idle:
                return self._idle.pop()
            self._opened += 1
        try:
            return await self._connect()
        except BaseException:
            await self._forget_one()
            raise

    async def _release(self, raw: Any, healthy: bool) -> None:
        if healthy and not self._closed:
            self._idle.append(raw)
            assert self._freed is not None
            async with self._freed:
                self._freed.notify()
            return
        with suppress(Exception):
            await self._close_raw(raw)
        await self._forget_one()

    async def _forget_one(self) -> None:
        assert self._freed is not None
        async with self._freed:
            self._opened -= 1
            self._freed.notify()

    # what each driver supplies
    async def _connect(self) -> Any:
        raise NotImplementedError

    async def _close_raw(self, raw: Any) -> None:
        raise NotImplementedError

    def _transaction(self, raw: Any) -> Any:
        raise NotImplementedError


class _SQLiteConn(AsyncConn):
    async def rows(self, query: Query) -> Rows:
        self.owner.queries += 1
        try:
            cursor = await self.raw.execute(query.sql, query.params)
            found = await cursor.fetchall()
        except sqlite3.DatabaseError as exc:
            raise translate(getattr(self.owner, "path", None), exc) from exc
        return Rows.of(found, column_names(cursor.description))


class AsyncSQLiteDatabase(AsyncDatabase):
    dialect = "sqlite"

    def __init__(self, path: Path, size: int = POOL_SIZE) -> None:
        super().__init__(size)
        self.path = path

    async def _connect(self) -> Any:
        import aiosqlite

        before = wal_guard.before_connect(self.path)  # a removed -wal: wait for it
        try:
            raw = await aiosqlite.connect(self.path, isolation_level=None,
                                          timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.DatabaseError as exc:
            raise translate(self.path, exc) from None
        try:
            await raw.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await raw.execute("PRAGMA query_only = ON")  # this store never writes
            await (await raw.execute("PRAGMA journal_mode")).fetchone()  # opens the log
            wal_guard.check_connection(self.path, before)
        except sqlite3.DatabaseError as exc:
            await raw.close()
            raise translate(self.path, exc) from None
        except TransientDatabaseError:
            await raw.close()
            raise
        return raw

    async def _close_raw(self, raw: Any) -> None:
        await raw.close()

    @asynccontextmanager
    async def _transaction(self, raw: Any) -> AsyncIterator[AsyncConn]:
        try:
            await raw.execute("BEGIN")
        except sqlite3.DatabaseError as exc:
            raise translate(self.path, exc) from exc
        try:
            yield _SQLiteConn(self, raw)
        finally:
            with suppress(sqlite3.Error):
                await raw.execute("COMMIT")


class _PostgresConn(AsyncConn):
    async def rows(self, query: Query) -> Rows:
        self.owner.queries += 1
        cursor = await self.raw.execute(pyformat(query.sql), query.params)
        found = await cursor.fetchall() if cursor.description else []
        return Rows.of(found, column_names(cursor.description))


class AsyncPostgresDatabase(AsyncDatabase):
    dialect = "postgresql"

    def __init__(self, url: str, display: str, size: int = POOL_SIZE) -> None:
        super().__init__(size)
        self.url = url
        self.display = display

    async def _connect(self) -> Any:
        import psycopg

        try:
            raw = await psycopg.AsyncConnection.connect(self.url, autocommit=True,
                                                        connect_timeout=10)
            # one snapshot for every query of a plan, and never a write
            await raw.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            await raw.set_read_only(True)
        except psycopg.Error as exc:
            raise DatabaseError(f"cannot connect to {self.display}: "
                                f"{str(exc).strip().splitlines()[0]}") from None
        return raw

    async def _close_raw(self, raw: Any) -> None:
        await raw.close()

    @asynccontextmanager
    async def _transaction(self, raw: Any) -> AsyncIterator[AsyncConn]:
        import psycopg

        try:
            async with raw.transaction():
                yield _PostgresConn(self, raw)
        except psycopg.Error as exc:
            raise DatabaseError(f"database error ({self.display}): "
                                f"{str(exc).strip().splitlines()[0]}") from exc


def open_async(db: Database, *, size: int = POOL_SIZE) -> AsyncDatabase:
    """The async reader over the same database as `db` (already opened and migrated)."""
    if db.dialect == "postgresql":
        return AsyncPostgresDatabase(db.target, db.display, size)
    if db.path is None:
        raise DatabaseError(f"no async driver for {db.display}")
    return AsyncSQLiteDatabase(db.path, size)
