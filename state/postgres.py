"""The PostgreSQL store (psycopg 3): pooled connections, timeouts, transient-error retries,
and a clock that follows the server's.

Transactions come from a psycopg_pool `ConnectionPool` (autocommit connections; a write is
BEGIN … COMMIT, a read runs its statements on their own, which under READ COMMITTED sees
what a transaction would). Getting a connection and beginning are retried with jittered
backoff while the server is unreachable or restarting, for up to `patience_s`; a failure
inside a transaction surfaces as `TransientDatabaseError` for the caller's own loop to retry.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any

from kanban.state.errors import DatabaseError, TransientDatabaseError
from kanban.state.pg_clock import ServerClock
from kanban.state.pg_connect import PgConnector, idle_and_open
from kanban.state.pg_faults import (
    OUT_OF_CONNECTIONS,
    first_line,
    hide_password,
    is_transient,
    normalise_url,
    out_of_connections,
    replanned,
)
from kanban.state.pg_fleet import LeanPool, SlotGate, SlotsBusy, listen_url, session_sql
from kanban.state.retry import Backoff
from kanban.state.store import Conn, Database

STATEMENT_TIMEOUT_S = 60
PATIENCE_S = 15.0  # how long a transaction waits for the server before giving up
POOL_MAX = 4
POOL_WAIT_S = 1.0  # longer without a connection: look at the server directly
NOTIFY_CHANNEL = "kanban"  # the triggers of migration 3 notify here
_BACKOFF = Backoff(first_s=0.05, cap_s=1.0)
# The pool logs every failed reconnection; the caller reports what matters in one line.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())


class PostgresDatabase(Database):
    dialect = "postgresql"

    def __init__(self, url: str, *, patience_s: float = PATIENCE_S, pool_max: int = POOL_MAX,
                 statement_timeout_s: float = STATEMENT_TIMEOUT_S) -> None:
        try:
            import psycopg
            import psycopg_pool
        except ImportError:
            raise DatabaseError("PostgreSQL needs psycopg and psycopg_pool: pip install "
                                "'kanban-workbench[postgres]'") from None
        self._psycopg = psycopg
        self._psycopg_pool = psycopg_pool
        self.url = normalise_url(url)
        self.patience_s = patience_s
        self.pool_max = pool_max
        self.server_clock = ServerClock()
        # Behind a transaction pooler (found on the first connection): no session options,
        # the timeouts SET LOCAL in every transaction, no LISTEN on this URL.
        self.connector = PgConnector(self.url, psycopg, statement_timeout_s=statement_timeout_s,
                                     clock=self.server_clock, on_pooler=self._pooler_found)
        self.lean_gate: SlotGate | None = None
        self.lean_pool = False  # a worker's LeanPool instead of the psycopg_pool
        self._pool: Any = None
        self._lock = threading.Lock()
        self._writing = threading.RLock()  # a worker's writes, one at a time
        ref = weakref.ref(self)

        def forget_in_child() -> None:
            db = ref()
            if db is not None:
                db._forget()

        os.register_at_fork(after_in_child=forget_in_child)

    @property
    def target(self) -> str:
        return self.url

    @property
    def display(self) -> str:
        return hide_password(self.url)

    # connections
    @property
    def pooled(self) -> bool | None:
        """Whether a transaction pooler stands in between (None until a connection tells)."""
        return self.connector.pooled

    def connect(self, url: str | None = None) -> Any:
        """A connection of its own (not pooled), e.g. for LISTEN; DatabaseError if none."""
        try:
            return self.connector.connect(url or self.url)
        except self._psycopg.Error as exc:
            raise self._translate(exc, f"cannot connect to {self.display}",
                                  connecting=True) from None

    def listening_url(self) -> str | None:
        """Where this database's change notifications can be heard (None: nowhere, poll)."""
        if self.pooled is None:
            self.connect().close()  # learn whether a pooler stands in between
        return listen_url(self.url, bool(self.pooled))

    def listen(self) -> Any:
        """A connection of its own LISTENing for the board's change notifications; read them
        with its `notifies(timeout=...)`. DatabaseError when there is nowhere to listen."""
        url = self.listening_url()
        if url is None:
            raise DatabaseError(f"{self.display} is a transaction pooler: set KANBAN_DB_LISTEN "
                                "to a direct URL to LISTEN")
        raw = self.connect(normalise_url(url))
        try:
            raw.execute(f"LISTEN {NOTIFY_CHANNEL}")
        except self._psycopg.Error as exc:
            with suppress(Exception):
                raw.close()
            raise self._translate(exc, f"cannot listen on {self.display}") from None
        return raw

    def for_worker(self, slots: str | None) -> None:
        """Connections only while in use (plus a moment), each holding one of the
        dispatcher's slots when it gave some; lease checks only at renewals."""
        self.lean_pool, self.lean_gate = True, SlotGate.from_env(slots)
        self.quiet_worker = True
        self.dispose()

    def _pool_(self) -> Any:
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None and self.lean_pool:
                    self._pool = LeanPool(lambda: self.connector.connect(self.url),
                                          self.lean_gate, configure=self.server_clock.sample,
                                          check=idle_and_open)
                elif self._pool is None:
                    self._pool = self._psycopg_pool.ConnectionPool(
                        self.url, kwargs=self.connector.kwargs(), min_size=1,
                        max_size=self.pool_max, open=False, name="kanban",
                        configure=self.connector.configure, check=idle_and_open,
                        timeout=self.patience_s, reconnect_timeout=3600.0, num_workers=1)
                    self._pool.open(wait=False)
                pool = self._pool
        return pool

    def _pooler_found(self) -> None:
        """A pooler refused the startup options: connections made before asked for them."""
        if not self.lean_pool:  # a lean pool connects through the connector each time
            self._drop_pool()

    def _drop_pool(self) -> None:
        with self._lock:
            stale, self._pool = self._pool, None
        if stale is not None:
            stale.close(timeout=0)

    def _forget(self) -> None:
        """In a forked child: never touch the parent's pool or its sockets."""
        self._pool = None
        self._lock = threading.Lock()
        self._writing = threading.RLock()

    def _translate(self, exc: BaseException, what: str, *, in_doubt: bool = False,
                   connecting: bool = False) -> DatabaseError:
        message = f"{what}: {first_line(exc)}"
        if is_transient(exc, connecting=connecting):
            kind = OUT_OF_CONNECTIONS if out_of_connections(exc) else None
            return TransientDatabaseError(message, in_doubt=in_doubt, kind=kind)
        return DatabaseError(message)

    def _checkout(self, begin: bool, taken: list[tuple[Any, Any]]) -> tuple[Any, Any]:
        """(pool, live connection), in a transaction if `begin`, waiting out an outage. The
        pair is put in `taken` as soon as the pool hands it over, so that a caller
        interrupted before this returns can give it back."""
        psycopg = self._psycopg
        deadline = time.monotonic() + self.patience_s
        attempt = 0
        while True:
            wait = max(0.01, min(POOL_WAIT_S, deadline - time.monotonic()))
            pool = self._pool_()
            try:
                raw = pool.getconn(timeout=wait)
            except self._psycopg_pool.PoolClosed:
                continue  # another thread renewed the pool meanwhile: take the new one
            except SlotsBusy as exc:  # the dispatcher's other workers hold every slot
                if time.monotonic() >= deadline:
                    raise TransientDatabaseError(f"{exc} ({self.display})") from None
                continue
            except self._psycopg_pool.PoolTimeout:
                error = self._diagnose()
                if not isinstance(error, TransientDatabaseError) or \
                        time.monotonic() >= deadline:
                    raise error from None
                continue
            except psycopg.Error as exc:  # a lean pool connects in this thread
                error = self._translate(exc, f"cannot connect to {self.display}",
                                        connecting=True)
                if not isinstance(error, TransientDatabaseError) or \
                        time.monotonic() >= deadline:
                    raise error from None
                time.sleep(min(_BACKOFF.delay(attempt), max(0.0, deadline - time.monotonic())))
                attempt += 1
                continue
            taken[:] = [(pool, raw)]
            try:
                if self.server_clock.stale:
                    self.server_clock.sample(raw)
                if self.pooled:  # reads too: a pooler's session keeps no timeout of ours
                    raw.execute(session_sql(self.connector.timeout_ms,
                                            self.connector.idle_in_transaction_ms))
                elif begin:
                    raw.execute("BEGIN")
                return pool, raw
            except psycopg.Error as exc:
                self._discard(pool, raw)
                taken.clear()
                if not is_transient(exc) or time.monotonic() >= deadline:
                    raise self._translate(exc, f"database error ({self.display})") from None
            time.sleep(min(_BACKOFF.delay(attempt), max(0.0, deadline - time.monotonic())))
            attempt += 1

    def _diagnose(self) -> DatabaseError:
        """Why the pool found no connection in time: one direct attempt tells. If the server
        answers, the pool is still backing off from an outage that is over: start afresh."""
        try:
            probe = self.connect()
        except DatabaseError as exc:
            time.sleep(min(POOL_WAIT_S, _BACKOFF.cap_s))  # not a busy loop while it is away
            return exc
        probe.close()
        self._drop_pool()
        return TransientDatabaseError(f"no free connection to {self.display}")

    @staticmethod
    def _discard(pool: Any, raw: Any) -> None:
        with suppress(Exception):
            raw.close()
        with suppress(Exception):
            pool.putconn(raw)  # a closed connection is replaced, not reused

    @staticmethod
    def _checkin(pool: Any, raw: Any) -> None:
        try:
            pool.putconn(raw)  # a pool closed meanwhile closes it
        except Exception:  # noqa: BLE001 - never lose the connection itself
            with suppress(Exception):
                raw.close()

    # transactions
    @contextmanager
    def write(self) -> Iterator[Conn]:
        with self._own_writes(), self._transaction(write=True) as conn:
            yield conn

    @contextmanager
    def _own_writes(self) -> Iterator[None]:
        """A worker's writes one at a time: its heartbeat and its agent touch the same card
        and run rows, in orders that deadlocked each other (and spent the lease in retries);
        one connection at a time is also all it needs."""
        if not self.lean_pool:
            yield
            return
        with self._writing:
            yield

    @contextmanager
    def read(self) -> Iterator[Conn]:
        with self._transaction(write=False) as conn:
            yield conn

    @contextmanager
    def statement(self) -> Iterator[Conn]:
        """A connection for one self-contained statement (atomic on its own: one round trip,
        no BEGIN/COMMIT). For the single-statement hot paths of kanban/postgres_paths.py."""
        with self._own_writes(), self._transaction(write=False) as conn:
            yield conn

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Conn]:
        psycopg = self._psycopg
        taken: list[tuple[Any, Any]] = []
        try:
            pool, raw = self._checkout(begin=write, taken=taken)
        except BaseException:
            # A Ctrl-C during the checkout's round trips (the clock, the timeouts, BEGIN):
            # the connection goes back closed, not lost to a pool of a few connections
            # that the dispatcher handing its cards back still needs.
            if taken:
                self._discard(*taken[0])
            raise
        committing = False
        try:
            yield Conn(raw, "postgresql")
            if write or self.pooled:
                committing = write
                raw.execute("COMMIT")
        except BaseException as exc:
            if raw.broken or raw.closed:
                self._discard(pool, raw)
                raw = None
            elif (write or self.pooled) and not committing:
                try:
                    raw.execute("ROLLBACK")
                except psycopg.Error:
                    self._discard(pool, raw)
                    raw = None
            if raw is not None and replanned(exc):
                try:  # psycopg forgets every statement it prepared on this connection
                    raw.execute("DEALLOCATE ALL")
                except psycopg.Error:
                    self._discard(pool, raw)
                    raw = None
            if isinstance(exc, psycopg.errors.IntegrityError):
                raise  # a programming error, not the database's state
            if isinstance(exc, psycopg.Error):
                # An error the server answered to COMMIT with means no commit; only a
                # connection lost before any answer leaves the outcome unknown.
                in_doubt = committing and getattr(exc, "sqlstate", None) is None
                raise self._translate(exc, f"database error ({self.display})",
                                      in_doubt=in_doubt) from exc
            raise
        finally:
            if raw is not None:
                self._checkin(pool, raw)

    # clock
    def clock(self) -> datetime:
        """Now, by the server's clock (leases, backoff and cron agree across hosts)."""
        now = self.server_clock.now()
        if now is None:
            with self.read():  # the first connection samples the clock
                pass
            now = self.server_clock.now()
            if now is None:  # pragma: no cover - sampled by configure or checkout
                raise TransientDatabaseError(f"no clock reading from {self.display}")
        return now

    def dispose(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            with suppress(Exception):
                pool.close(timeout=5)


__all__ = ["PostgresDatabase", "ServerClock", "first_line", "hide_password", "is_transient",
           "normalise_url"]
