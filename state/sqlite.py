"""The SQLite store: WAL, pragmas, `BEGIN IMMEDIATE` for every write, a connection per thread.

A thread keeps its connection and issues BEGIN [IMMEDIATE] / COMMIT / ROLLBACK itself.
Nested use on one thread (a read inside a write) gets a short-lived connection; a
connection that saw an error is discarded; a forked child forgets what its parent held.

A worker process (`for_worker`) keeps one connection for all its threads instead, taken
by one thread's transaction at a time: its threads (the agent's, the heartbeat's) rarely
touch the board at once, and a second connection cost each of 400 workers about 0.4 MiB
(its schema, page caches and malloc arena) and a descriptor.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import kanban.state.sqlite_probe as sqlite_probe
import kanban.state.wal_guard as wal_guard
from kanban.state.errors import CorruptDatabaseError, DatabaseError, TransientDatabaseError
from kanban.state.journal import (
    JOURNAL_KEY,
    MOUNTINFO,
    ROLLBACK,
    WAL,
    Journal,
    choose_journal,
)
from kanban.state.retry import Backoff
from kanban.state.sqlite_errors import describe_error, is_busy, translate
from kanban.state.sqlite_file import BUSY_TIMEOUT_MS, create_file, sqlite_target
from kanban.state.store import Conn, Database, Params
from kanban.state.timeutil import utcnow
from kanban.state.wakefile import RingingConnection, ring

PATIENCE_S = BUSY_TIMEOUT_MS / 1000  # how long a write waits for the lock, all tries included
BUSY_SLICE_S = 1.0  # SQLite's own busy handler waits this long per try; then a jittered pause
_BEGIN_BACKOFF = Backoff(first_s=0.02, cap_s=0.5)
T = TypeVar("T")
__all__ = ["BUSY_TIMEOUT_MS", "JOURNAL_CHOICES", "SQLiteDatabase", "create_file",
           "describe_error", "sqlite_target"]
JOURNAL_CHOICES = ("auto", ROLLBACK)  # auto: WAL unless the filesystem cannot keep it


class SQLiteDatabase(Database):
    dialect = "sqlite"
    clock = staticmethod(utcnow)  # the writing process's clock, at no cost

    def __init__(self, path: Path, *, synchronous: str = "NORMAL",
                 journal: str = "auto", mount_table: Path = MOUNTINFO,
                 vfs: str | None = None) -> None:
        if synchronous.upper() not in {"NORMAL", "FULL"}:
            raise DatabaseError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        if journal not in JOURNAL_CHOICES:
            raise DatabaseError(f"journal must be one of {', '.join(JOURNAL_CHOICES)}, "
                                f"not {journal!r}")
        self.path = path
        self.journal_wanted = journal
        self.mount_table = mount_table  # where the filesystem of the folder is read from
        # The SQLite VFS connections go through (None: the platform's). A seam like the
        # mount table: "unix-dotfile" has no shared memory, as some filesystems have none.
        self.vfs = vfs
        self.journal = Journal(WAL)  # what the first connection finds (choose_journal)
        self.file: Path = path  # never None here (the base class allows None)
        self.synchronous = synchronous.upper()
        self._local = threading.local()
        self._all: set[sqlite3.Connection] = set()
        self._lock = threading.Lock()
        self._one: _OneConnection | None = None  # a worker's (for_worker)
        self.patience_s = PATIENCE_S
        self.corrupt: str | None = None  # set on meeting a corrupt page: no more writes
        ref = weakref.ref(self)

        def forget_in_child() -> None:
            db = ref()
            if db is not None:
                db._forget()

        os.register_at_fork(after_in_child=forget_in_child)

    @property
    def target(self) -> str:
        return str(self.path)

    def connect(self) -> RingingConnection:
        """A new connection with the pragmas every kanban connection runs with."""
        # SQLite's busy handler waits one slice; _begin() retries slices up to patience_s.
        busy_ms = int(1000 * max(0.05, min(self.patience_s, BUSY_SLICE_S)))
        before = wal_guard.before_connect(self.file)
        raw = sqlite3.connect(sqlite_target(self.file, self.vfs), uri=self.vfs is not None,
                              timeout=busy_ms / 1000, isolation_level=None,
                              check_same_thread=False, cached_statements=256,
                              factory=RingingConnection)
        try:
            raw.execute(f"PRAGMA busy_timeout = {busy_ms}")
            self.journal = choose_journal(raw, self.file, wanted=self.journal_wanted,
                                          mount_table=self.mount_table)
            raw.execute(f"PRAGMA synchronous = {self.synchronous}")
            raw.execute("PRAGMA foreign_keys = ON")
            raw.arm()
        except sqlite3.Error:
            try:  # a log deleted under live processes reads as an I/O error: say which
                wal_guard.check_connection(self.file, before)
            finally:
                raw.close()
            raise
        try:  # and must not be replaced by a second one
            wal_guard.check_connection(self.file, before)
        except TransientDatabaseError:
            raw.close()
            raise
        return raw

    def journal_mode(self) -> str | None:
        with self.read():
            pass  # a connection, so the journal in force is known
        return self.journal.mode

    def journal_warning(self) -> str | None:
        self.journal_mode()
        return self.journal.warning

    def keep_journal(self) -> None:
        """Once migrated: a board in rollback mode says so in its settings, so every later
        process keeps it (on a local disk it would otherwise switch the file to WAL)."""
        if self.journal_warning() is None:
            return
        with self.write() as conn:
            conn.run("INSERT INTO setting (key, value) VALUES (:k, :v) ON CONFLICT (key) DO "
                     "UPDATE SET value = :v", {"k": JOURNAL_KEY, "v": ROLLBACK})

    def guard(self, wake: threading.Event | None = None) -> wal_guard.WalGuard | None:
        """Keep the write-ahead log in place while this process runs (see wal_guard).
        None without a log (the rollback journal); DatabaseError when it cannot (a
        read-only folder, say)."""
        if self.journal_warning() is not None:
            return None
        try:
            return wal_guard.WalGuard(self.file, wake=wake).start()
        except OSError as exc:
            raise DatabaseError(f"cannot guard the write-ahead log of {self.path}: "
                                f"{exc.strerror or exc}") from None
        except sqlite3.Error as exc:
            raise self._translate(exc) from None

    def for_worker(self, slots: str | None) -> None:
        """One connection for all of this process's threads, the one it holds (a spare
        opened it before its card) kept."""
        if self._one is None:
            self._one = _OneConnection(getattr(self._local, "conn", None))

    def _forget(self) -> None:
        """In a forked child: never touch the parent's connections."""
        self._local = threading.local()
        self._all = set()
        self._lock = threading.Lock()
        if self._one is not None:
            self._one = _OneConnection(None)

    @contextmanager
    def write(self) -> Iterator[Conn]:
        with self._transaction("BEGIN IMMEDIATE") as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Conn]:
        with self._transaction("BEGIN") as conn:
            yield conn

    def write_one(self, sql: str, params: Params = None) -> int:
        """In autocommit: SQLite takes the write lock when the statement starts and commits
        when it ends, all inside its own code. Between BEGIN IMMEDIATE and COMMIT a writer
        runs Python, and one the scheduler preempts there (400 workers on 2 cores) holds
        up every other writer for a whole time slice. Busy: waited out as `_begin` does
        (the statement did nothing)."""
        local = self._local
        if getattr(local, "busy", False) or self.corrupt is not None:
            return super().write_one(sql, params)  # inside this thread's transaction

        def once() -> int:
            raw = None
            try:
                raw = self._held()
                raw.arm()
                changed = Conn(raw, "sqlite").run(sql, params)
            except sqlite3.IntegrityError:
                raise  # a programming error, not the database's state
            except sqlite3.DatabaseError as exc:
                if raw is not None:
                    raw.take()
                    if not is_busy(exc):
                        self._discard(raw, False)
                raise
            if raw.take():
                ring(self.file)
            return changed

        local.busy = True
        turn = self._turn(False)
        if turn is not None:
            turn.acquire()
        try:
            return self._waiting_out_busy(once)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._translate(exc) from exc
        finally:
            local.busy = False
            if turn is not None:
                turn.release()

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[Conn]:
        local = self._local
        nested = getattr(local, "busy", False)
        if begin != "BEGIN" and self.corrupt is not None:
            raise CorruptDatabaseError(self.corrupt)
        turn = self._turn(nested)
        if turn is not None:
            turn.acquire()
        raw = None
        began: list[RingingConnection] = []  # the connection, named before its BEGIN runs
        try:
            if not nested:
                local.busy = True
            raw = self._begin(begin, nested, began)
            try:
                yield Conn(raw, "sqlite")
            except BaseException:
                self._rollback(raw, nested)
                raise
            raw.execute("COMMIT")
            if raw.take():
                ring(self.file)  # a dispatcher sleeps on this, not on every commit
        except sqlite3.DatabaseError as exc:
            if raw is not None:
                self._rollback(raw, nested)
                self._discard(raw, nested)
            if isinstance(exc, sqlite3.IntegrityError):
                raise  # a programming error, not the database's state
            raise self._translate(exc) from exc
        except BaseException:
            # A Ctrl-C (or a thread's exit) that landed after BEGIN ran but before the body
            # did: the transaction is undone here, or this thread's connection would keep
            # the write lock, and every other writer (this process's dispatcher handing
            # its cards back too) would wait it out and fail busy.
            if began and _in_transaction(began[0]):
                self._rollback(began[0], nested)
            raise
        finally:
            if nested and began:
                began[0].close()
            elif not nested:
                local.busy = False
            if turn is not None:
                turn.release()

    def _turn(self, nested: bool) -> threading.Lock | None:
        """What gives this thread its turn at a worker's one connection: None elsewhere,
        and for a nested transaction (it has a connection of its own)."""
        return None if self._one is None or nested else self._one.lock

    def _begin(self, begin: str, nested: bool,
               began: list[RingingConnection]) -> RingingConnection:
        """A connection in a transaction; busy: waited out (the body has not run yet, so
        nothing is in doubt). The connection is put in `began` before its BEGIN runs, so
        the caller can undo a BEGIN that an exception interrupted on its way back."""
        def once() -> RingingConnection:
            raw = None
            try:
                raw = self.connect() if nested else self._held()
                began[:] = [raw]
                if begin != "BEGIN":
                    raw.arm()  # a board migrated since this connection opened
                raw.execute(begin)
                if begin == "BEGIN" and self.journal.mode != WAL:
                    self._share(raw)
                return raw
            except sqlite3.OperationalError:
                if nested and raw is not None:
                    raw.close()  # a short-lived connection of its own
                raise

        return self._waiting_out_busy(once)

    def _waiting_out_busy(self, step: Callable[[], T]) -> T:
        """`step()` until the database does not answer it busy: SQLite's own handler waits
        within a slice, a jittered pause comes between slices, and after patience_s the
        last busy error is raised (becoming one TransientDatabaseError). Any other error
        is raised at once."""
        deadline = time.monotonic() + self.patience_s
        attempt = 0
        while True:
            try:
                return step()
            except sqlite3.DatabaseError as exc:
                if not is_busy(exc):
                    raise
                pause = _BEGIN_BACKOFF.delay(attempt)
                attempt += 1
                if time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)

    @staticmethod
    def _share(raw: sqlite3.Connection) -> None:
        """The rollback journal: take the read lock now, while a busy answer can still be
        waited out like BEGIN IMMEDIATE's (a writer committing holds readers off; with WAL
        a read never waits)."""
        try:
            raw.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            raw.execute("ROLLBACK")
            raise

    def probe_write(self) -> None:
        """In a fresh process (see sqlite_probe): a new worker's view of the file."""
        if self.corrupt is not None:
            raise CorruptDatabaseError(self.corrupt)
        error = sqlite_probe.write_elsewhere(str(self.path), self.patience_s, BUSY_SLICE_S)
        if error is not None:
            raise self._translate(error)

    def _translate(self, exc: sqlite3.Error) -> DatabaseError:
        error = translate(self.path, exc)
        if isinstance(error, CorruptDatabaseError):
            self.corrupt = error.message
        return error

    def _rollback(self, raw: RingingConnection, nested: bool) -> None:
        raw.take()  # what rolled back rings nobody
        try:
            if raw.in_transaction:
                raw.execute("ROLLBACK")
        except sqlite3.Error:
            self._discard(raw, nested)

    def _keeper(self) -> threading.local | _OneConnection:
        """Where this thread's connection is kept: its own slot, or the worker's one."""
        return self._local if self._one is None else self._one

    def _held(self) -> RingingConnection:
        keeper = self._keeper()
        raw: RingingConnection | None = getattr(keeper, "conn", None)
        if raw is None:
            raw = self.connect()
            keeper.conn = raw
            with self._lock:
                self._all.add(raw)
        return raw

    def _discard(self, raw: sqlite3.Connection, nested: bool) -> None:
        keeper = self._keeper()
        if not nested and getattr(keeper, "conn", None) is raw:
            keeper.conn = None
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
        if self._one is not None:
            self._one.conn = None


class _OneConnection:
    """A worker's connection, shared by its threads one transaction at a time."""

    def __init__(self, conn: RingingConnection | None) -> None:
        self.conn = conn
        self.lock = threading.Lock()


def _in_transaction(raw: sqlite3.Connection) -> bool:
    """False for a connection already closed (a nested one whose BEGIN failed)."""
    try:
        return raw.in_transaction
    except sqlite3.ProgrammingError:
        return False
