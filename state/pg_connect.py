"""Connections to one PostgreSQL URL: the libpq settings every kanban connection runs with
(timeouts, TCP keepalives), and what the first connection learns, whether a transaction
pooler stands between kanban and the server.

A pooler changes three things: the timeouts cannot travel as startup options (a stock
PgBouncer refuses them, or passes them on without applying them), so each transaction sets
them itself (pg_fleet.session_sql); statements are never prepared, since each transaction
may run in another server session; and nobody LISTENs through it (postgres.listen).
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

from kanban.state.errors import DatabaseError
from kanban.state.pg_clock import ServerClock

CONNECT_TIMEOUT_S = 5
IDLE_IN_TRANSACTION_TIMEOUT_S = 120
# Statements a pooled connection has run this often are prepared (parsed and planned once,
# by name) when nothing stands between kanban and the server: the claim's plan alone took
# 1.7 ms of its 4.5 ms. Off behind a pooler, which may give each transaction another session.
PREPARE_AFTER = 3


def idle_and_open(raw: Any) -> None:
    """A pool's check on checkout, without a round trip: an idle connection the server has
    written to (an error before closing, or end of file) is dead."""
    if not raw.closed and not raw.broken:
        readable, _, _ = select.select([raw.fileno()], [], [], 0)
        if not readable:
            return
    raw.close()  # closed, the pool replaces it rather than handing it out again
    raise DatabaseError("connection closed by the server")


class PgConnector:
    """Makes the connections of one URL. `pooled` is None until the first connection tells;
    `on_pooler` is called when a pooler refused the startup options (connections made before
    asked for them, and must go)."""

    def __init__(self, url: str, psycopg: Any, *, statement_timeout_s: float,
                 clock: ServerClock, on_pooler: Callable[[], None]) -> None:
        self.url = url
        self.psycopg = psycopg
        self.statement_timeout_s = statement_timeout_s
        self.clock = clock
        self.on_pooler = on_pooler
        self.pooled: bool | None = None

    @property
    def timeout_ms(self) -> int:
        return int(self.statement_timeout_s * 1000)

    @property
    def idle_in_transaction_ms(self) -> int:
        return IDLE_IN_TRANSACTION_TIMEOUT_S * 1000

    def kwargs(self, *, options: bool | None = None) -> dict[str, Any]:
        """libpq settings of every kanban connection: timeouts and TCP keepalives, so a dead
        peer or a hung statement is noticed in seconds, not at the kernel's leisure. No
        prepared statements until `configure` knows no pooler stands in between. The
        timeouts travel as startup options unless a pooler refuses them."""
        from psycopg.conninfo import conninfo_to_dict

        given = conninfo_to_dict(self.url)
        kwargs: dict[str, Any] = {
            "autocommit": True, "prepare_threshold": None,
            "connect_timeout": given.get("connect_timeout") or CONNECT_TIMEOUT_S,
            "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
            "keepalives_count": 3, "tcp_user_timeout": 20_000,
            "application_name": given.get("application_name") or "kanban"}
        if options if options is not None else not self.pooled:
            kwargs["options"] = " ".join(filter(None, [
                str(given.get("options") or ""),
                f"-c statement_timeout={self.timeout_ms}",
                f"-c idle_in_transaction_session_timeout={self.idle_in_transaction_ms}",
            ]))
        return kwargs

    def connect(self, url: str) -> Any:
        """One connection (psycopg's errors pass through), learning on the first whether a
        pooler stands in between: one that refuses the startup options, or takes them
        without applying them."""
        if self.pooled is not None:
            return self.psycopg.connect(url, **self.kwargs())
        try:
            raw = self.psycopg.connect(url, **self.kwargs(options=True))
        except self.psycopg.OperationalError as exc:
            if "unsupported startup parameter" not in str(exc):
                raise
            self.pooled = True
            self.on_pooler()
            return self.psycopg.connect(url, **self.kwargs())
        try:
            self.learn_pooled(raw)
        except BaseException:
            raw.close()
            raise
        return raw

    def learn_pooled(self, raw: Any) -> None:
        """A pooler that passed our startup options on would not apply them either."""
        applied = raw.execute("SELECT current_setting('statement_timeout')").fetchone()[0]
        self.pooled = applied in ("0", "", None)

    def configure(self, raw: Any) -> None:
        """Each new pooled connection: the server's clock; whether a pooler stands between
        (a refusing pooler is found when connecting fails); prepared statements when none
        does."""
        self.clock.sample(raw)
        if self.pooled is None:
            self.learn_pooled(raw)
        if self.pooled is False:
            raw.prepare_threshold = PREPARE_AFTER
