"""Rows 17.1-17.2: PostgreSQL server connections (pg_stat_activity) held by running workers
of 4 dispatchers on a model that hangs, reaching the server directly and through PgBouncer
(transaction pooling, 20 server connections), in one run. The baseline is what the design
allows (docs/postgres-fleet.md): 4 × connection_bound(workers) directly; the pooler's 20
plus one direct LISTEN connection per dispatcher behind it.

Left out where no server answers on 127.0.0.1:5432 or pgbouncer is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import Sizes
from bench.report import Goal, Row

DISPATCHERS = 4
WORKERS = {"full": 64, "quick": 16, "smoke": 2}
POOL = 20


def run(sizes: Sizes, work: Path) -> list[Row]:
    from bench.postgres import available, scratch_database

    why = available()
    if why is not None or not os.access("/usr/sbin/pgbouncer", os.X_OK):
        print(f"bench: pg_fleet rows left out: {why or 'pgbouncer is not installed'}",
              file=sys.stderr)
        return []
    from kanban.state.pg_fleet import connection_bound
    from tests.support.pgbouncer import pgbouncer

    workers = WORKERS.get(sizes.name, 64)
    rows = []
    with scratch_database("fleet_direct") as url:
        held = _held(url, url, workers, work / "direct")
        bound = DISPATCHERS * connection_bound(workers)
        rows.append(Row("17.1", f"server connections, {DISPATCHERS}×{workers} running "
                        "workers, direct", "", held, bound, "design bound",
                        Goal("value", "<=", bound)))
    with scratch_database("fleet_pooled") as url, \
            pgbouncer(work / "pgbouncer", pool_size=POOL) as bouncer:
        held = _held(bouncer.url(url), url, workers, work / "pooled")
        rows.append(Row("17.2", f"server connections, {DISPATCHERS}×{workers} running "
                        "workers, through PgBouncer", "", held, POOL + DISPATCHERS,
                        "pool + LISTEN", Goal("value", "<=", POOL + DISPATCHERS)))
    return rows


def _held(url: str, direct: str, workers: int, work: Path) -> float:
    """Server connections of the database while every worker waits on the model."""
    from kanban.cards import NewCard
    from kanban.service import Kanban
    from kanban.state.pg_fleet import LISTEN_ENV
    from tests.support.db import open_postgres
    from tests.support.llm_server import LLMServer, Reply, tool_reply
    from tests.support.pg import pg_query
    from tests.support.procs import start_dispatcher

    work.mkdir(parents=True, exist_ok=True)
    db = open_postgres(direct)
    try:
        kb = Kanban(db)
        for n in range(DISPATCHERS * workers):
            kb.add_card(NewCard(title=f"card {n}", goal="wait"))
    finally:
        db.dispose()
    answer = threading.Event()

    def hang(body: dict) -> Reply:
        answer.wait(300)
        return tool_reply(("kanban_complete", {"summary": "late"}))

    config = work / "kanban.toml"
    config.write_text('[limits]\nlease_s = 120\n[profiles.default]\nmodel = "openai:m"\n')
    name = direct.rsplit("/", 1)[1]
    with LLMServer(responder=hang) as llm:
        env = {**os.environ, **llm.env(), "KANBAN_CONFIG": str(config), LISTEN_ENV: direct,
               "XDG_DATA_HOME": str(work / "data")}
        procs = [start_dispatcher(url, "--max-workers", str(workers),  # type: ignore[arg-type]
                                  env=env, log=work / f"d{n}.log")
                 for n in range(DISPATCHERS)]
        try:
            llm.wait_for_requests(DISPATCHERS * workers, timeout=600)
            samples = []
            for _ in range(10):  # the most seen over a few renewals' worth of time
                samples.append(pg_query(direct, "SELECT count(*) FROM pg_stat_activity "
                                                "WHERE datname = %s AND pid <> "
                                                "pg_backend_pid()", (name,))[0][0])
                time.sleep(0.5)
        finally:
            answer.set()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return float(max(samples))
