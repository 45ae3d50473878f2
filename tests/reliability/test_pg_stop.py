"""A dispatcher told to stop while its PostgreSQL is unreachable (the route to the server
cut: nothing answers, nothing is refused) never hangs: it hands back what it can within its
drain timeout, then exits non-zero naming the cards it could not hand back; a second
SIGTERM ends it at once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from tests.support.db import PG_HOST, PG_PORT, open_postgres
from tests.support.llm_server import LLMServer, Reply, tool_reply
from tests.support.pg import pg_counts
from tests.support.procs import start_dispatcher, wait_until
from tests.support.tcp_cut import CuttableRelay

pytestmark = pytest.mark.postgres
DRAIN_S = 2.0


@dataclass
class CutBoard:
    url: str  # through the relay
    direct: str
    relay: CuttableRelay
    env: dict[str, str]
    log: Path
    cards: list[int]
    llm: LLMServer

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def cut_board(pg_url: str, tmp_path: Path) -> Iterator[CutBoard]:
    answer = threading.Event()

    def hang(body: dict) -> Reply:  # the model hangs until the test ends
        answer.wait(120)
        return tool_reply(("kanban_complete", {"summary": "late"}))

    db = open_postgres(pg_url)
    relay = CuttableRelay(PG_HOST, PG_PORT).start()
    config = tmp_path / "kanban.toml"
    config.write_text('[limits]\nlease_s = 30\n[profiles.default]\nmodel = "openai:m"\n')
    try:
        kb = Kanban(db)
        cards = [kb.add_card(NewCard(title=f"c{n}", goal="g")).id for n in range(2)]
        with LLMServer(responder=hang) as llm:
            env = {**os.environ, **llm.env(), "KANBAN_CONFIG": str(config)}
            url = pg_url.replace(f":{PG_PORT}/", f":{relay.port}/")
            yield CutBoard(url, pg_url, relay, env, tmp_path / "d.log", cards, llm)
            answer.set()
    finally:
        relay.close()
        db.dispose()


def _start_and_cut(board: CutBoard) -> subprocess.Popen[bytes]:
    proc = start_dispatcher(board.url, "--max-workers", "2",  # type: ignore[arg-type]
                            "--drain-timeout", f"{DRAIN_S:g}", env=board.env, log=board.log)
    board.llm.wait_for_requests(2, timeout=60)  # both workers wait on the model
    board.relay.cut()
    return proc


def test_stopping_with_the_database_cut_off_exits_within_the_drain_timeout(
        cut_board: CutBoard) -> None:
    proc = _start_and_cut(cut_board)
    proc.send_signal(signal.SIGTERM)
    began = time.monotonic()
    try:
        code = proc.wait(timeout=60)  # a hang guard: the bound itself is the bench's
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - began
    text = cut_board.text()
    assert code != 0, text
    named = re.search(r"could not hand back (.*?) \(", text)
    assert named is not None, text
    assert sorted(int(n) for n in re.findall(r"#(\d+)", named.group(1))) == cut_board.cards
    assert "Traceback" not in text
    # the cards stay running under their leases, which lapse for another dispatcher
    assert pg_counts(cut_board.direct) == {"running": 2}
    assert took < DRAIN_S + 20, (took, text)  # drain, then a kill grace at most


def test_a_second_sigterm_ends_a_stuck_stop_at_once(cut_board: CutBoard) -> None:
    proc = _start_and_cut(cut_board)
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping" in cut_board.text(), timeout=30, what="the stop begun")
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = cut_board.text()
    assert code != 0, text
    assert "could not hand back" in text, text
    # where it waited is kept for whoever reads the log: every thread's stack, in a file
    # the log names (a file of the dispatcher's own, not a link someone put there)
    named = re.search(r"when its stop ran out of time: (\S+)", text)
    assert named is not None, text
    stacks = Path(named.group(1))
    assert not stacks.is_symlink() and stacks.stat().st_mode & 0o777 == 0o600
    dumped = stacks.read_text()
    assert dumped.count("Thread 0x") >= 2 and 'File "' in dumped, dumped
