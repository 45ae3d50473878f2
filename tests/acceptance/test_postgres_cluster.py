"""PostgreSQL with several dispatchers as real processes: chaos, backends terminated, a
skewed clock, restarts under the same hostname, rolling restarts.

Each test gets its own database; only that database's backends are ever terminated. The
config lives outside any .kanban folder and reaches dispatchers and workers through
KANBAN_CONFIG. Skipped without a server (a failure under CI=true).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from kanban.cards import NewCard, add_card
from kanban.service import Kanban
from kanban.state.store import Database
from tests.acceptance.conftest import slow_steps
from tests.support.db import open_postgres
from tests.support.llm_server import LLMServer, Reply, tool_reply
from tests.support.pg import (
    database_outage,
    ensure_faketime,
    pg_counts,
    pg_query,
    terminate_backends,
)
from tests.support.procs import KANBAN, start_dispatcher, stop, wait_until

pytestmark = pytest.mark.postgres
FAKETIME_KANBAN = Path(__file__).resolve().parents[1] / "support" / "faketime_kanban.py"


@dataclass
class PgBoard:
    url: str
    kb: Kanban
    home: Path
    env: dict[str, str]

    def configure(self, text: str) -> None:
        self.config.write_text(text)

    @property
    def config(self) -> Path:
        return self.home / "elsewhere" / "kanban.toml"

    def script(self, name: str, steps: list[dict]) -> str:
        import json

        path = self.home / f"{name}.json"
        path.write_text(json.dumps(steps))
        return f"scripted:{path}"

    def add_many(self, n: int, **fields: object) -> list[int]:
        return [self.kb.add_card(NewCard(title=f"card {i}", goal=f"step {i}",
                                         **fields)).id  # type: ignore[arg-type]
                for i in range(n)]

    def dispatcher(self, name: str, *args: str, env: dict[str, str] | None = None,
                   command: list[str] | None = None) -> subprocess.Popen[bytes]:
        log = self.home / f"{name}.log"
        if command is None:
            return start_dispatcher(self.url, *args, env=env or self.env, log=log)  # type: ignore[arg-type]
        with open(log, "ab") as out:  # its own group: a wrapper may not pass signals on
            return subprocess.Popen([*command, "--db", self.url, "dispatch", *args],
                                    stdout=out, stderr=subprocess.STDOUT, env=env or self.env,
                                    start_new_session=True)

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")


@pytest.fixture
def pg_board(pg_url: str, tmp_path: Path) -> Iterator[PgBoard]:
    db: Database = open_postgres(pg_url)
    config = tmp_path / "elsewhere" / "kanban.toml"
    config.parent.mkdir()
    env = {**os.environ, "KANBAN_CONFIG": str(config)}
    try:
        yield PgBoard(pg_url, Kanban(db), tmp_path, env)
    finally:
        db.dispose()


def _all_done(url: str, total: int) -> bool:
    return pg_counts(url).get("done", 0) == total


def _a_live_worker(url: str) -> int | None:
    rows = pg_query(url, "SELECT r.pid FROM run r JOIN card c ON c.id = r.card_id "
                         "AND c.claim_token = r.claim_token WHERE c.status = 'running' "
                         "AND r.pid IS NOT NULL ORDER BY random() LIMIT 1")
    return rows[0][0] if rows else None


def _assert_each_done_exactly_once(url: str, total: int) -> None:
    assert pg_counts(url) == {"done": total}
    completed = pg_query(url, "SELECT card_id, count(*) FILTER (WHERE outcome = 'completed'), "
                              "count(*) FILTER (WHERE finished_at IS NULL) FROM run "
                              "GROUP BY card_id")
    assert len(completed) == total
    assert all(done == 1 and open_runs == 0 for _, done, open_runs in completed), completed
    # Runs of one card never overlap: each began after the previous one was closed.
    overlapping = pg_query(url, """
        SELECT a.card_id FROM run a JOIN run b ON a.card_id = b.card_id AND b.id > a.id
        WHERE b.started_at < a.finished_at""")
    assert overlapping == []
    late = pg_query(url, "SELECT m.run_id, m.seq, m.role, r.outcome, "
                         "extract(epoch FROM m.at - r.finished_at) * 1000 FROM message m "
                         "JOIN run r ON r.id = m.run_id "
                         "WHERE m.at > r.finished_at AND m.role != 'tool' ORDER BY m.run_id")
    assert late == [], "messages after their run ended (run, seq, role, outcome, ms): " + \
        "; ".join(f"{r} {q} {role} {o} {float(ms):.1f}" for r, q, role, o, ms in late[:20])


def test_chaos_300_cards_two_dispatchers_each_done_exactly_once(pg_board: PgBoard) -> None:
    spec = pg_board.script("quick", slow_steps(0.05, heartbeats=1))
    pg_board.configure(f'[limits]\nlease_s = 2.0\n[profiles.default]\nmodel = "{spec}"\n')
    total = 300
    pg_board.add_many(total, max_attempts=20)
    d1 = pg_board.dispatcher("d1", "--max-workers", "4")
    d2 = pg_board.dispatcher("d2", "--max-workers", "4")
    d3 = None
    try:
        for n in range(6):  # SIGKILL running workers here and there
            wait_until(lambda n=n: pg_counts(pg_board.url).get("done", 0) >= 20 * (n + 1),
                       timeout=120, what=f"{20 * (n + 1)} cards done")
            pid = wait_until(lambda: _a_live_worker(pg_board.url), timeout=60, what="a worker")
            with suppress(ProcessLookupError):  # it may have finished first
                os.killpg(pid, signal.SIGKILL)
        d1.kill()  # a dispatcher dies without cleanup; its workers live on as orphans
        d1.wait()
        d3 = pg_board.dispatcher("d3", "--max-workers", "4")
        wait_until(lambda: _all_done(pg_board.url, total), timeout=300, what="300 cards done")
        assert d2.poll() is None and d3.poll() is None
    finally:
        codes = [stop(d) for d in (d2, d3) if d is not None]
    assert codes == [0, 0], pg_board.log("d2") + pg_board.log("d3")
    _assert_each_done_exactly_once(pg_board.url, total)
    dispatchers = pg_query(pg_board.url, "SELECT count(DISTINCT dispatcher_id) FROM run")[0][0]
    assert dispatchers == 3


def test_backends_terminated_twice_no_dispatcher_exits_nothing_lost(pg_board: PgBoard) -> None:
    spec = pg_board.script("quick", slow_steps(0.1, heartbeats=2))
    pg_board.configure(f'[limits]\nlease_s = 3.0\n[profiles.default]\nmodel = "{spec}"\n')
    total = 90
    pg_board.add_many(total, max_attempts=10)
    dispatchers = [pg_board.dispatcher(f"d{n}", "--max-workers", "4") for n in (1, 2)]
    terminated = []
    try:
        for at in (20, 50):
            wait_until(lambda at=at: pg_counts(pg_board.url).get("done", 0) >= at,
                       timeout=120, what=f"{at} cards done")
            terminated.append(terminate_backends(pg_board.url))
            assert [d.poll() for d in dispatchers] == [None, None]
        wait_until(lambda: _all_done(pg_board.url, total), timeout=240, what="every card done")
        assert [d.poll() for d in dispatchers] == [None, None]
    finally:
        codes = [stop(d) for d in dispatchers]
    logs = pg_board.log("d1") + pg_board.log("d2")
    assert codes == [0, 0], logs
    assert all(n >= 2 for n in terminated), terminated  # dispatchers, listeners, workers
    assert "kanban: error" not in logs and "Traceback" not in logs, logs
    _assert_each_done_exactly_once(pg_board.url, total)


def _worker_logs(pattern: str) -> str:
    logs = Path(os.environ["XDG_DATA_HOME"]) / "kanban" / "logs"
    return "".join(p.read_text(errors="replace") for p in sorted(logs.glob(pattern)))


def test_an_outage_shorter_than_the_lease_loses_no_worker(pg_board: PgBoard) -> None:
    spec = pg_board.script("slow", slow_steps(0.3, heartbeats=6))
    pg_board.configure(f'[limits]\nlease_s = 20.0\n[profiles.default]\nmodel = "{spec}"\n')
    total = 12
    pg_board.add_many(total, max_attempts=1)  # a lost worker would fail its card
    dispatchers = [pg_board.dispatcher(f"d{n}", "--max-workers", "3") for n in (1, 2)]
    try:
        wait_until(lambda: pg_counts(pg_board.url).get("running", 0) == 6, timeout=60,
                   what="six live workers")
        with database_outage(pg_board.url):
            wait_until(lambda: all("database unavailable" in pg_board.log(f"d{n}")
                                   for n in (1, 2)), timeout=30, what="dispatchers waiting")
            wait_until(lambda: "database unavailable" in _worker_logs("*.log"), timeout=30,
                       what="workers waiting")
            assert [d.poll() for d in dispatchers] == [None, None]
        wait_until(lambda: _all_done(pg_board.url, total), timeout=120, what="every card done")
        assert [d.poll() for d in dispatchers] == [None, None]
    finally:
        codes = [stop(d) for d in dispatchers]
    assert codes == [0, 0]
    assert "database back" in pg_board.log("d1") + pg_board.log("d2")
    _assert_each_done_exactly_once(pg_board.url, total)
    assert pg_query(pg_board.url, "SELECT count(*) FROM run") == [(total,)]  # none retried


def test_a_worker_cut_off_by_an_outage_steps_aside_before_its_lease_runs_out(
        pg_board: PgBoard) -> None:
    spec = pg_board.script("slow", slow_steps(0.5, heartbeats=10))
    pg_board.configure(f'[limits]\nlease_s = 1.5\n[profiles.default]\nmodel = "{spec}"\n')
    ids = pg_board.add_many(2, max_attempts=3)
    d = pg_board.dispatcher("d", "--max-workers", "2")
    try:
        wait_until(lambda: pg_counts(pg_board.url).get("running", 0) == 2, timeout=60,
                   what="two live workers")
        pids = [p for (p,) in pg_query(pg_board.url, "SELECT pid FROM run WHERE pid IS NOT "
                                                     "NULL")]
        with database_outage(pg_board.url):
            wait_until(lambda: _worker_logs("*-1.log").count("stayed unreachable as the "
                                                            "lease ran out") == 2,
                       timeout=30, what="both workers stepping aside before their lease's end")
            wait_until(lambda: not any(_alive(pid) for pid in pids), timeout=30,
                       what="both workers gone")
        wait_until(lambda: _all_done(pg_board.url, len(ids)), timeout=120, what="cards done")
        assert d.poll() is None
    finally:
        assert stop(d) == 0
    outcomes = dict(pg_query(pg_board.url, "SELECT card_id, string_agg(outcome, ',' ORDER BY "
                                           "id) FROM run GROUP BY card_id"))
    # handed back as the host's fault, not lapsed: the outage spent no attempt
    assert sorted(outcomes.values()) == ["handed_back,completed"] * 2


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_dispatcher_30s_ahead_requeues_no_live_run_and_fires_no_cron_early(
        pg_board: PgBoard) -> None:
    faketime = ensure_faketime()
    # The honest dispatcher's workers wait on the model until the skewed one has looked at
    # their runs for a while: however long it takes to start on a busy machine, the runs
    # it must not requeue are live while it ticks.
    release = threading.Event()
    llm = LLMServer(responder=lambda body: _held_reply(release)).start()
    env = {**pg_board.env, **llm.env()}
    pg_board.configure('[limits]\nlease_s = 3.0\n[profiles.default]\nmodel = "openai:m"\n')
    ids = pg_board.add_many(3)
    honest = pg_board.dispatcher("honest", "--max-workers", "3", env=env)
    skewed = None
    try:
        wait_until(lambda: pg_counts(pg_board.url).get("running", 0) == 3, timeout=60,
                   what="three live runs")
        # A host whose wall clock is 30 s ahead. (Its monotonic clock is not skewed: no
        # host's is, and libfaketime's faking of it stretches every timed wait by 30 s.)
        skewed = pg_board.dispatcher("skewed", "--max-workers", "2",
                                     command=[faketime, "-f", "+30s", sys.executable,
                                              str(FAKETIME_KANBAN)],
                                     env={**env, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                                          "KANBAN_DEBUG": "1"})
        wait_until(lambda: _beats_of(pg_board.url) >= 3, timeout=60,
                   what="the skewed dispatcher ticking")
        server_now, beat = pg_query(pg_board.url, "SELECT now(), heartbeat_at FROM dispatcher "
                                                  "ORDER BY id DESC LIMIT 1")[0]
        # Its clock is the server's: a heartbeat by its own clock would lie 30 s ahead. (A
        # beat older than now only means the machine is busy, not skewed.)
        ahead = (beat - server_now).total_seconds()
        assert ahead < 5, f"heartbeat {ahead:.1f}s ahead of the server: {pg_board.log('skewed')}"

        due = server_now + timedelta(seconds=8)
        job = _add_cron_job(pg_board, due=due)
        # Watched by the server's clock: nothing fires before the job is due.
        wait_until(lambda: pg_query(pg_board.url, "SELECT now() >= %s", (
            due - timedelta(seconds=0.5),))[0][0], timeout=60, what="the job nearly due")
        fired = pg_query(pg_board.url, "SELECT last_fire_at FROM cron_job WHERE name = %s",
                         (job,))[0][0]
        assert fired is None, f"fired at {fired}, due {due}"
        assert pg_counts(pg_board.url).get("running", 0) >= 3  # all along: none requeued
        release.set()
        wait_until(lambda: _all_done(pg_board.url, len(ids)), timeout=60, what="cards done")
        assert skewed.poll() is None, pg_board.log("skewed")
    finally:
        release.set()
        if skewed is not None and skewed.poll() is None:
            os.killpg(skewed.pid, signal.SIGTERM)  # faketime waits for the dispatcher
            skewed.wait(timeout=30)
        stop(honest)
        llm.stop()
    outcomes = pg_query(pg_board.url, "SELECT outcome, count(*) FROM run WHERE card_id = "
                                      "ANY(%s) GROUP BY outcome", (ids,))
    assert dict(outcomes) == {"completed": 3}, pg_board.log("skewed")
    assert pg_query(pg_board.url, "SELECT count(*) FROM event WHERE kind = 'requeued'") == [
        (0,)]
    # A clean exit, no error. (The signal also ends faketime itself, which then no longer
    # waits for the dispatcher: its last line may come a moment later.)
    wait_until(lambda: pg_board.log("skewed").rstrip().endswith("stopped"), timeout=30,
               what="the skewed dispatcher's clean stop")


def _add_cron_job(pg_board: PgBoard, *, due: object) -> str:
    result = subprocess.run([*KANBAN, "--db", pg_board.url, "cron", "add", "nightly",
                             "-s", "every 1h", "--goal", "the nightly report"], env=pg_board.env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    pg_query(pg_board.url, "UPDATE cron_job SET next_fire_at = %s WHERE name = 'nightly'",
             (due,))
    return "nightly"


def _beats_of(url: str) -> int:
    """How many ticks the newest dispatcher has made (its heartbeat moved past its start)."""
    rows = pg_query(url, "SELECT extract(epoch FROM heartbeat_at - started_at) FROM dispatcher "
                         "ORDER BY id DESC LIMIT 1")
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def test_restart_under_the_same_hostname_never_kills_its_new_workers(
        pg_board: PgBoard) -> None:
    # Every worker waits on the model until the test lets it answer: the dead instance's
    # orphans are still at work when the new dispatcher looks, however long it took to
    # start on a busy machine (a scripted 4 s of work was over before it came up).
    release = threading.Event()
    llm = LLMServer(responder=lambda body: _held_reply(release)).start()
    env = {**pg_board.env, **llm.env()}
    pg_board.configure('[limits]\nlease_s = 2.0\n[profiles.default]\nmodel = "openai:m"\n')
    first_ids = pg_board.add_many(2, max_attempts=1)
    old = pg_board.dispatcher("old", "--max-workers", "2", env=env)
    # Started workers, not just claims: a claim whose worker never started goes back to
    # the queue (handed_back), which is not the orphan this test is about.
    wait_until(lambda: all(_worker_of(pg_board.url, c) for c in first_ids), timeout=60,
               what="the old dispatcher's workers")
    old.kill()  # the host "restarts": the dispatcher dies without cleanup
    old.wait()
    later = pg_board.add_many(2, max_attempts=1)
    new = pg_board.dispatcher("new", "--max-workers", "4", env=env)
    try:
        new_pid = wait_until(lambda: _worker_of(pg_board.url, later[0]), timeout=60,
                             what="a worker of the new dispatcher")
        # A dead instance of this host left runs whose pids now name the new workers (as
        # after a reboot or a container restart): one from another boot with the new
        # worker's very start time, one from this boot with another start time.
        start = int(Path(f"/proc/{new_pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        stale = _fake_stale_runs(pg_board, new_pid, start)
        wait_until(lambda: all(_status(pg_board.url, c) != "running" for c in stale),
                   timeout=60, what="the stale runs rescued")
        wait_until(lambda: all(_outcomes(pg_board.url, c) == ["handed_back"]
                               for c in first_ids), timeout=60, what="the orphans stopped")
        assert _worker_of(pg_board.url, later[0]) in (new_pid, None)
        release.set()
        wait_until(lambda: _all_done(pg_board.url, len(first_ids) + len(later) + len(stale)),
                   timeout=120, what="every card done")
    finally:
        release.set()
        code = stop(new)
        llm.stop()
    assert code == 0
    outcomes = dict(pg_query(pg_board.url, "SELECT card_id, string_agg(outcome, ',' ORDER BY "
                                           "id) FROM run GROUP BY card_id"))
    for card in later:  # the new dispatcher's own workers were never killed
        assert outcomes[card] == "completed"
    for card in first_ids:  # the dead instance's orphans: stopped and handed back unspent
        assert outcomes[card] == "handed_back,completed"
    for card in stale:
        assert outcomes[card] == "lease_lost,completed"
    log = pg_board.log("new")
    assert f"stopping pid {new_pid}" not in log and f"(pid {new_pid} stopped)" not in log


def _worker_of(url: str, card_id: int) -> int | None:
    rows = pg_query(url, "SELECT r.pid FROM run r JOIN card c ON c.id = r.card_id AND "
                         "c.claim_token = r.claim_token WHERE c.id = %s AND r.pid IS NOT NULL",
                    (card_id,))
    return rows[0][0] if rows else None


def _held_reply(release: threading.Event) -> Reply:
    """The model's answer (complete the card), once the test lets it answer."""
    release.wait(120)
    return tool_reply(("kanban_complete", {"summary": "done"}))


def _outcomes(url: str, card_id: int) -> list[str]:
    return [o for (o,) in pg_query(url, "SELECT outcome FROM run WHERE card_id = %s AND "
                                        "outcome IS NOT NULL ORDER BY id", (card_id,))]


def _status(url: str, card_id: int) -> str:
    return pg_query(url, "SELECT status FROM card WHERE id = %s", (card_id,))[0][0]


def _fake_stale_runs(pg_board: PgBoard, pid: int, start: int) -> list[int]:
    """Two running cards with expired leases, claimed by dead instances of this host: one of
    another boot (with `pid`'s very start time), one of this boot (another start time)."""
    host, boot = pg_query(pg_board.url, "SELECT host, boot_id FROM dispatcher "
                                        "ORDER BY id DESC LIMIT 1")[0]
    cards = []
    for instance, boot_id, proc_start in (("dead-other-boot", "another-boot", start),
                                          ("dead-this-boot", boot, start + 1)):
        dispatcher_id = pg_query(pg_board.url, """
            INSERT INTO dispatcher (host, pid, started_at, heartbeat_at, instance, boot_id)
            VALUES (%s, 1, now() - interval '1 day', now() - interval '1 day', %s, %s)
            RETURNING id""", (host, instance, boot_id))[0][0]
        with pg_board.kb.db.write() as conn:  # one transaction: never ready to claim
            card = add_card(conn, NewCard("left running by a dead instance"),
                            pg_board.kb.clock()).id
            conn.execute("""
                WITH c AS (UPDATE card SET status = 'running', claim_token = md5(random()::text),
                               attempt = 1, started_at = now(),
                               lease_expires_at = now() - interval '1 minute'
                           WHERE id = :card RETURNING id, claim_token)
                INSERT INTO run (card_id, attempt, claim_token, dispatcher_id, host, pid,
                                 proc_start, started_at, heartbeat_at, input_tokens,
                                 output_tokens, cached_tokens)
                SELECT id, 1, claim_token, :d, :host, :pid, :start, now(), now(), 0, 0, 0
                FROM c""", {"card": card, "d": dispatcher_id, "host": host, "pid": pid,
                            "start": proc_start})
            # its model had a turn: a lapse after it spends an attempt (lease_lost)
            conn.execute("INSERT INTO message (run_id, seq, role, content, at) "
                         "SELECT id, 1, 'user', 'go', now() FROM run WHERE card_id = :card",
                         {"card": card})
        cards.append(card)
    assert boot is not None
    return cards


def test_rolling_restart_of_two_dispatchers_spends_no_attempt(pg_board: PgBoard) -> None:
    spec = pg_board.script("slow", slow_steps(0.3, heartbeats=4))
    pg_board.configure(f'[limits]\nlease_s = 3.0\n[profiles.default]\nmodel = "{spec}"\n')
    total = 24
    pg_board.add_many(total, max_attempts=1)  # one spent attempt would fail a card
    live = {name: pg_board.dispatcher(name, "--max-workers", "3") for name in ("a", "b")}
    handed_back = 0
    try:
        for name, fresh in (("a", "a2"), ("b", "b2")):
            wait_until(lambda: pg_counts(pg_board.url).get("running", 0) >= 2, timeout=60,
                       what="running cards")
            assert stop(live.pop(name)) == 0  # SIGTERM: hand back, then exit
            handed_back = _handed_back(pg_board.url)
            live[fresh] = pg_board.dispatcher(fresh, "--max-workers", "3")
        wait_until(lambda: _all_done(pg_board.url, total), timeout=180, what="every card done")
    finally:
        codes = [stop(d) for d in live.values()]
    assert codes == [0, 0]
    assert handed_back >= 2
    assert pg_counts(pg_board.url) == {"done": total}
    unspent = pg_query(pg_board.url, "SELECT count(*) FROM card WHERE attempt - retry_base = 1")
    assert unspent == [(total,)]  # each card spent exactly the attempt that completed it


def _handed_back(url: str) -> int:
    return pg_query(url, "SELECT count(*) FROM run WHERE outcome = 'handed_back'")[0][0]
