"""PostgreSQL out of connections for kanban's role ("too many connections", SQLSTATE 53300,
as "sorry, too many clients already"): workers that cannot connect give their card back
without spending an attempt, the dispatcher's breaker opens, nothing crashes, and the card
runs once connections are to be had again."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.dispatcher.rescue import STALLED
from kanban.service import Kanban
from tests.support.db import PG_HOST, PG_PORT, open_postgres
from tests.support.llm_server import LLMServer, tool_reply
from tests.support.pg import pg_query
from tests.support.procs import start_dispatcher, stop, wait_until

pytestmark = pytest.mark.postgres


@pytest.fixture
def role_url(pg_url: str) -> Iterator[tuple[str, str]]:
    """pg_url, owned by and reached as a role of this test's own (superusers ignore
    connection limits)."""
    role = f"kanban_limited_{uuid.uuid4().hex[:10]}"
    name = pg_url.rsplit("/", 1)[1]
    pg_query(pg_url, f'CREATE ROLE "{role}" LOGIN')
    try:
        pg_query(pg_url, f'ALTER DATABASE "{name}" OWNER TO "{role}"')
        pg_query(pg_url, f'GRANT ALL ON SCHEMA public TO "{role}"')
        yield f"postgresql://{role}@{PG_HOST}:{PG_PORT}/{name}", role
    finally:
        pg_query(pg_url, f'ALTER DATABASE "{name}" OWNER TO postgres')
        pg_query(pg_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE usename = %s", (role,))
        pg_query(pg_url, f'DROP OWNED BY "{role}"')
        pg_query(pg_url, f'DROP ROLE IF EXISTS "{role}"')


@pytest.mark.parametrize("stalled", [False, True], ids=["prompt", "stalled"])
def test_a_server_out_of_connections_spends_no_attempt(
        pg_url: str, role_url: tuple[str, str], tmp_path: Path, stalled: bool) -> None:
    """`stalled`: the first worker is also starved of CPU (stopped) until its lease lapses
    and the dispatcher kills it, as on a busy host (CI): it never called its model, so that
    too spends nothing."""
    url, role = role_url
    db = open_postgres(url)
    config = tmp_path / "kanban.toml"
    config.write_text('[limits]\nlease_s = 4\n[profiles.default]\nmodel = "openai:m"\n')
    log = tmp_path / "d.log"

    def connections() -> int:
        return int(pg_query(pg_url, "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                            (role,))[0][0])

    with LLMServer(responder=lambda body: tool_reply(("kanban_complete", {"summary": "ok"}))
                   ) as llm:
        env = {**os.environ, **llm.env(), "KANBAN_CONFIG": str(config)}
        proc = start_dispatcher(url, "--max-workers", "1", env=env, log=log)  # type: ignore[arg-type]
        try:
            wait_until(lambda: "started" in log.read_text(), timeout=60, what="the dispatcher")
            db.dispose()
            # No new connection for the role: those the dispatcher holds stay open (the
            # limit is checked at connect), every worker's is refused. A limit of "the
            # dispatcher's count now" let a worker in when a backend that had just
            # disconnected (the forkserver's, under load) was still counted.
            pg_query(pg_url, f'ALTER ROLE "{role}" CONNECTION LIMIT 0')
            assert connections() >= 1
            card = Kanban(open_postgres(pg_url)).add_card(NewCard(title="t", goal="g",
                                                                  max_attempts=1))
            if stalled:
                found = wait_until(lambda: re.search(r"worker pid (\d+)", log.read_text()),
                                   timeout=60, what="a worker")
                worker = int(found.group(1))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker, signal.SIGSTOP)
                wait_until(lambda: "lease expired" in log.read_text() or STALLED
                           in log.read_text(), timeout=60, what="the stalled worker's lease out",
                           explain=lambda: _story(pg_url, card.id, log))
                assert pg_query(pg_url, "SELECT status FROM card WHERE id = %s",
                                (card.id,)) != [("failed",)], _story(pg_url, card.id, log)
            try:
                wait_until(lambda: "circuit breaker open" in log.read_text(), timeout=120,
                           what="the breaker open")
            except AssertionError:
                raise AssertionError(f"no breaker open in:\n{_story(pg_url, card.id, log)}"
                                     ) from None
            assert proc.poll() is None
            pg_query(pg_url, f'ALTER ROLE "{role}" CONNECTION LIMIT -1')
            wait_until(lambda: pg_query(pg_url, "SELECT status FROM card WHERE id = %s",
                                        (card.id,)) == [("done",)], timeout=120,
                       what="the card done", explain=lambda: _story(pg_url, card.id, log))
        finally:
            code = stop(proc, timeout=60)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text
    assert "too many connections" in text, text
    # max_attempts = 1, yet done: each worker that could not connect handed the card back
    outcomes = [o for (o,) in pg_query(pg_url, "SELECT outcome FROM run WHERE card_id = %s "
                                               "ORDER BY id", (card.id,))]
    assert outcomes[-1] == "completed" and len(outcomes) >= 2, outcomes
    assert set(outcomes[:-1]) == {"handed_back"}, outcomes
    errors = [e for (e,) in pg_query(pg_url, "SELECT error FROM run WHERE card_id = %s",
                                     (card.id,))]
    assert any(STALLED in (e or "") for e in errors) == stalled, errors


def _story(pg_url: str, card_id: int, log: Path) -> str:
    """The card's status and runs, each run's messages, and the dispatcher log's tail."""
    lines = [str(pg_query(pg_url, "SELECT status, attempt FROM card WHERE id = %s",
                          (card_id,)))]
    for run in pg_query(pg_url, "SELECT id, outcome, error, exit_code FROM run "
                                "WHERE card_id = %s ORDER BY id", (card_id,)):
        messages = pg_query(pg_url, "SELECT role, tool_calls IS NOT NULL FROM message "
                                    "WHERE run_id = %s ORDER BY seq", (run[0],))
        lines.append(f"{run} {messages}")
    return "\n".join(lines) + "\n" + log.read_text()[-6000:]
