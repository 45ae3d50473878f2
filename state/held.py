"""One SQLite connection held per thread, with transactions begun on the driver.

Checking a connection out of SQLAlchemy's pool and running its begin/commit
machinery costs more than SQLite's own commit; the hot path (claims, heartbeats,
worker writes) pays it on every transaction. A thread keeps its connection and
issues BEGIN [IMMEDIATE] / COMMIT / ROLLBACK on the driver. Nested use (a read
inside a write on the same thread) falls back to the pool; a connection that saw
an error is discarded; forked children forget what their parent held.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import Connection, Engine

MANUAL = "kanban_manual"  # tells the engine's begin listener to stay out of the way


class HeldConnections:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._local = threading.local()
        self._all: set[Connection] = set()
        self._lock = threading.Lock()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (held := ref()) and held._forget())

    def _forget(self) -> None:
        """In a forked child: never touch the parent's connections."""
        self._local = threading.local()
        self._all = set()
        self._lock = threading.Lock()

    def _take(self) -> Connection | None:
        local = self._local
        if getattr(local, "busy", False):
            return None
        conn = getattr(local, "conn", None)
        if conn is None or conn.closed or conn.invalidated:
            conn = self.engine.connect().execution_options(**{MANUAL: True})
            local.conn = conn
            with self._lock:
                self._all.add(conn)
        local.busy = True
        return conn

    def _discard(self, conn: Connection) -> None:
        self._local.conn = None
        with self._lock:
            self._all.discard(conn)
        with suppress(Exception):
            conn.close()

    @contextmanager
    def transaction(self, begin: str) -> Iterator[Connection | None]:
        """Yield the thread's connection inside `begin` … COMMIT, or None when nested."""
        conn = self._take()
        if conn is None:
            yield None
            return
        try:
            driver = conn.connection.dbapi_connection
            driver.execute(begin)  # type: ignore[union-attr]
            try:
                yield conn
            except BaseException:
                if driver.in_transaction:  # type: ignore[union-attr]
                    driver.execute("ROLLBACK")  # type: ignore[union-attr]
                self._discard(conn)
                raise
            driver.execute("COMMIT")  # type: ignore[union-attr]
        except BaseException:
            if self._local.conn is conn:
                self._discard(conn)
            raise
        finally:
            self._local.busy = False

    def close_all(self) -> None:
        with self._lock:
            held, self._all = self._all, set()
        for conn in held:
            with suppress(Exception):
                conn.close()
        self._local = threading.local()
