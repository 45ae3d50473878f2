"""A fleet on PostgreSQL through PgBouncer (transaction pooling, 20 server connections):
4 dispatchers × 64 workers on a model that hangs, then answers. Every card is done exactly
once, no attempt is spent, nothing anywhere runs out of connections, and a 3 s PgBouncer
restart in the middle of the completions loses nothing.

The dispatchers LISTEN on a direct URL (KANBAN_DB_LISTEN); everything else goes through
the pooler. Skipped without PostgreSQL or pgbouncer (a failure under CI=true).

The lease is 120 s: 256 workers starting at once on a shared 2-core machine (a load of
40-100 from other suites beside it) took longer than a 30 s lease to all reach their model,
and some leases lapsed before their first renewal; that is CPU, not connections (no worker
ran out of connections, none saw "too many clients").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.pg_fleet import LISTEN_ENV
from tests.support.db import open_postgres
from tests.support.llm_server import LLMServer, Reply, tool_reply
from tests.support.pg import pg_counts, pg_query
from tests.support.pgbouncer import PgBouncer, pgbouncer
from tests.support.procs import start_dispatcher, stop, wait_for_count

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
DISPATCHERS = 4
WORKERS = 64
CARDS = DISPATCHERS * WORKERS
OUT_OF_CONNECTIONS = ("too many clients", "no more connections allowed",
                      "remaining connection slots")


class HangingModel:
    """Every call waits until `answer` is set, then completes its card."""

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.closing = threading.Event()

    def __call__(self, body: dict) -> Reply:
        while not self.answer.wait(0.5):
            if self.closing.is_set():
                break
        return tool_reply(("kanban_complete", {"summary": "answered"}))


@pytest.fixture
def fleet_bouncer(pg_url: str, tmp_path: Path) -> Iterator[PgBouncer]:
    with pgbouncer(tmp_path / "pgbouncer", pool_size=20) as bouncer:
        yield bouncer


def _query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    """pg_query with patience for a machine 256 workers keep busy."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=60) as conn:
        return conn.execute(sql, params).fetchall()


def _done(url: str) -> int:
    return int(_query(url, "SELECT count(*) FROM card WHERE status = 'done'")[0][0])


def _server_connections(pg_url: str) -> int:
    name = pg_url.rsplit("/", 1)[1]
    return int(_query(pg_url, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                              "AND pid <> pg_backend_pid()", (name,))[0][0])


def _logs(tmp_path: Path) -> str:
    logs = Path(os.environ["XDG_DATA_HOME"]) / "kanban" / "logs"
    files = [*sorted(logs.glob("*.log")), *sorted(tmp_path.glob("d*.log"))]
    return "".join(p.read_text(errors="replace") for p in files)


def test_four_dispatchers_of_64_workers_through_pgbouncer(
        pg_url: str, fleet_bouncer: PgBouncer, tmp_path: Path) -> None:
    db = open_postgres(pg_url)
    try:
        kb = Kanban(db)
        for n in range(CARDS):
            kb.add_card(NewCard(title=f"card {n}", goal="answer", max_attempts=1))
    finally:
        db.dispose()
    config = tmp_path / "kanban.toml"
    config.write_text('[limits]\nlease_s = 120\n[profiles.default]\nmodel = "openai:m"\n')
    model = HangingModel()
    with LLMServer(responder=model) as llm:
        env = {**os.environ, **llm.env(), "KANBAN_CONFIG": str(config), LISTEN_ENV: pg_url}
        url = fleet_bouncer.url(pg_url)
        procs = [start_dispatcher(url, "--max-workers", str(WORKERS),  # type: ignore[arg-type]
                                  env=env, log=tmp_path / f"d{n}.log")
                 for n in range(DISPATCHERS)]

        def explain() -> str:
            return f"{pg_counts(pg_url)}\n{_logs(tmp_path)[-5000:]}"

        try:
            wait_for_count(lambda: len(llm.requests), CARDS, stall_s=180,  # all on the model
                           what="workers waiting on the model", explain=explain)
            hanging = _server_connections(pg_url)
            assert hanging <= 20 + DISPATCHERS, hanging  # the pool, and one LISTEN each
            model.answer.set()
            wait_for_count(lambda: _done(pg_url), CARDS // 4, stall_s=180,
                           what="a quarter of the cards done", explain=explain)
            fleet_bouncer.restart(3.0)
            wait_for_count(lambda: _done(pg_url), CARDS, stall_s=180, what="every card done",
                           explain=explain)
            assert [p.poll() for p in procs] == [None] * DISPATCHERS
        finally:
            model.closing.set()
            codes = [stop(p, timeout=60) for p in procs]
    logs = _logs(tmp_path)
    assert codes == [0] * DISPATCHERS, logs[-5000:]
    assert not [w for w in OUT_OF_CONNECTIONS if w in logs], logs[-5000:]
    assert "Traceback" not in logs, logs[-5000:]
    assert pg_counts(pg_url) == {"done": CARDS}
    runs = pg_query(pg_url, "SELECT count(*), count(*) FILTER (WHERE outcome = 'completed'), "
                            "count(DISTINCT card_id), max(c.attempt) FROM run "
                            "JOIN card c ON c.id = run.card_id")
    assert runs == [(CARDS, CARDS, CARDS, 1)]  # one run each: no attempt spent, none lost
