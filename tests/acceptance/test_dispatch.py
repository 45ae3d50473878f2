"""The dispatcher and its workers as real processes: exactly-once, ordering, pause, faults."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from kanban.dispatcher.procs import signal_group
from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.procs import counts, kanban, query, start_dispatcher, stop, wait_until


def _all_finished(db: Path, total: int) -> bool:
    c = counts(db)
    return c.get("done", 0) + c.get("failed", 0) + c.get("cancelled", 0) == total


def test_200_cards_two_dispatchers_each_done_once_in_dependency_order(
        board: BoardFiles, tmp_path: Path) -> None:
    ids: list[int] = []
    for i in range(200):
        deps = [ids[-1]] if i % 5 else []  # 40 chains of 5
        ids.append(board.add(f"card {i}", goal=f"step {i}", depends_on=deps))
    dispatchers = [start_dispatcher(board.path, "--max-workers", "4",
                                    log=tmp_path / f"d{n}.log") for n in range(2)]
    try:
        wait_until(lambda: _all_finished(board.path, 200), timeout=240, what="200 cards done")
    finally:
        codes = [stop(d) for d in dispatchers]
    assert codes == [0, 0]
    assert counts(board.path) == {"done": 200}
    runs = query(board.path, "SELECT card_id, count(*), sum(outcome = 'completed') FROM run "
                             "GROUP BY card_id")
    assert len(runs) == 200 and all(n == 1 and ok == 1 for _, n, ok in runs)
    late = query(board.path, """
        SELECT d.card_id FROM dependency d
        JOIN run r ON r.card_id = d.card_id JOIN card dep ON dep.id = d.depends_on_id
        WHERE r.started_at < dep.finished_at""")
    assert late == []
    both = query(board.path, "SELECT count(DISTINCT dispatcher_id) FROM run")[0][0]
    assert both == 2
    assert query(board.path, "PRAGMA integrity_check") == [("ok",)]


@pytest.mark.parametrize("board", ["auto", "rollback"], indirect=True)
def test_chaos_killed_workers_and_dispatcher_lose_nothing(board: BoardFiles,
                                                          tmp_path: Path) -> None:
    """Workers and a dispatcher SIGKILLed mid-run; with WAL and with the rollback journal."""
    journal = "delete" if board.kb.db.journal_warning() else "wal"
    spec = board.script("slow", slow_steps(0.25, heartbeats=3))
    board.configure(f'[limits]\nlease_s = 1.0\n[profiles.default]\nmodel = "{spec}"\n'
                    "max_attempts = 5\n")
    ids = [board.add(f"chaos {i}", max_attempts=5) for i in range(24)]
    d1 = start_dispatcher(board.path, "--max-workers", "3", log=tmp_path / "d1.log")
    d2 = start_dispatcher(board.path, "--max-workers", "3", log=tmp_path / "d2.log")
    d3 = None
    killed = 0
    try:
        for _ in range(6):
            pid = wait_until(lambda: _a_live_worker(board.path), timeout=60, what="a worker")
            signal_group(pid, signal.SIGKILL)  # gone already (finished) is fine too
            killed += 1
        d1.kill()  # a dispatcher dies without cleanup; its workers live on as orphans
        d1.wait()
        d3 = start_dispatcher(board.path, "--max-workers", "3", log=tmp_path / "d3.log")
        wait_until(lambda: _all_finished(board.path, len(ids)), timeout=180,
                   what="every card finished")
    finally:
        for d in (d2, d3):
            if d is not None:
                stop(d)
    assert killed == 6
    assert counts(board.path).get("running", 0) == 0
    statuses = dict(query(board.path, "SELECT id, status FROM card"))
    for card_id, status in statuses.items():
        if status == "failed":
            attempt, max_attempts = query(board.path, "SELECT attempt, max_attempts FROM card "
                                                      "WHERE id = ?", card_id)[0]
            assert attempt >= max_attempts
        else:
            assert status == "done"
    _assert_one_live_worker_per_card(board.path)
    _assert_no_stale_writes(board.path)
    assert query(board.path, "PRAGMA integrity_check") == [("ok",)]
    assert query(board.path, "PRAGMA journal_mode") == [(journal,)]  # kept all along


def _a_live_worker(db: Path) -> int | None:
    rows = query(db, "SELECT r.pid FROM run r JOIN card c ON c.id = r.card_id "
                     "AND c.claim_token = r.claim_token WHERE c.status = 'running' "
                     "AND r.pid IS NOT NULL ORDER BY random() LIMIT 1")
    return rows[0][0] if rows else None


def _assert_one_live_worker_per_card(db: Path) -> None:
    """Runs of one card never overlap: each began after the previous one was closed."""
    rows = query(db, "SELECT card_id, started_at, finished_at FROM run ORDER BY card_id, id")
    previous: dict[int, str] = {}
    for card_id, started, finished in rows:
        assert finished is not None, f"run of #{card_id} left open"
        if card_id in previous:
            assert started >= previous[card_id], f"#{card_id} had two live runs"
        previous[card_id] = finished


def _assert_no_stale_writes(db: Path) -> None:
    """Transcript, usage and worker events all fall inside their run's lease."""
    late = query(db, "SELECT m.run_id FROM message m JOIN run r ON r.id = m.run_id "
                     "WHERE m.at > r.finished_at AND m.role != 'tool'")
    assert late == []
    late_usage = query(db, "SELECT u.run_id FROM usage u JOIN run r ON r.id = u.run_id "
                           "WHERE u.at > r.finished_at")
    assert late_usage == []


def test_pause_keeps_cards_ready_until_resume(board: BoardFiles) -> None:
    kanban(board.path, "pause")
    card = int(kanban(board.path, "add", "while paused").stdout.strip().lstrip("#"))
    kanban(board.path, "dispatch", "--once")
    assert query(board.path, "SELECT status FROM card WHERE id = ?", card) == [("ready",)]
    assert query(board.path, "SELECT count(*) FROM run") == [(0,)]
    assert "paused" in kanban(board.path, "board").stdout
    kanban(board.path, "resume")
    kanban(board.path, "dispatch", "--once")
    assert query(board.path, "SELECT status, result FROM card WHERE id = ?", card)[0][0] == "done"


def test_board_pause_only_holds_that_board(board: BoardFiles) -> None:
    kanban(board.path, "boards", "create", "other")
    held = board.add("held", board="other")
    free = board.add("free")
    kanban(board.path, "pause", "--board", "other")
    kanban(board.path, "dispatch", "--once")
    status = dict(query(board.path, "SELECT id, status FROM card"))
    assert status[held] == "ready" and status[free] == "done"


@pytest.mark.parametrize(("model", "message"), [
    ("openai:gpt-4o-mini", "OPENAI_API_KEY is not set"),
    ("anthropic:claude-x", "ANTHROPIC_API_KEY is not set"),
    ("scripted:no-such-script", "unknown script"),
])
def test_fatal_model_config_fails_at_once_without_retries(board: BoardFiles, model: str,
                                                          message: str) -> None:
    board.configure(f'[profiles.bad]\nmodel = "{model}"\n')
    card = board.add("doomed", profile="bad", max_attempts=3)
    # the card it ran failed: exit 4 (kanban/cli/exit_codes.py)
    assert kanban(board.path, "dispatch", "--once", check=False).returncode == 4
    status, attempt, error = query(board.path, "SELECT status, attempt, error FROM card "
                                               "WHERE id = ?", card)[0]
    assert (status, attempt) == ("failed", 1)
    assert message in error
    assert query(board.path, "SELECT outcome FROM run WHERE card_id = ?", card) == [("failed",)]


def test_a_card_naming_an_unknown_provider_fails_at_once(board: BoardFiles) -> None:
    card = board.add("doomed", model="nope:some-model", max_attempts=3)
    # the card it ran failed: exit 4 (kanban/cli/exit_codes.py)
    assert kanban(board.path, "dispatch", "--once", check=False).returncode == 4
    status, attempt, error = query(board.path, "SELECT status, attempt, error FROM card "
                                               "WHERE id = ?", card)[0]
    assert (status, attempt) == ("failed", 1) and "nope" in error


def test_a_config_naming_an_unknown_provider_is_refused_before_dispatching(
        board: BoardFiles) -> None:
    board.configure('[profiles.bad]\nmodel = "nope:some-model"\n')
    card = board.add("waits", max_attempts=3)
    done = kanban(board.path, "dispatch", "--once", check=False)
    assert done.returncode == 1
    assert done.stderr == (f"kanban: error: {board.home / 'config.toml'}: [profiles.bad].model "
                           "= 'nope:some-model': unknown provider 'nope' (known: openai, "
                           "openai-responses, anthropic, scripted)\n")
    assert query(board.path, "SELECT status FROM card WHERE id = ?", card) == [("ready",)]


def test_timeout_terminates_worker_and_records_timed_out(board: BoardFiles) -> None:
    spec = board.script("stuck", [{"text": "thinking", "delay_s": 600}])
    board.configure(f'[profiles.stuck]\nmodel = "{spec}"\n')
    card = board.add("never ends", profile="stuck", timeout_s=1, max_attempts=1)
    # the card it ran failed: exit 4 (kanban/cli/exit_codes.py)
    assert kanban(board.path, "dispatch", "--once", check=False).returncode == 4
    assert query(board.path, "SELECT status FROM card WHERE id = ?", card) == [("failed",)]
    outcome, code = query(board.path, "SELECT outcome, exit_code FROM run WHERE card_id = ?",
                          card)[0]
    assert outcome == "timed_out"
    assert code == -signal.SIGTERM


def test_a_profiles_timeout_applies_to_cards_added_without_one(board: BoardFiles) -> None:
    """`kanban add`, the web board and cron leave a card's timeout unset unless given; the
    dispatcher then takes the profile's (issue 29: settings apply where they say)."""
    spec = board.script("stuck", [{"text": "thinking", "delay_s": 600}])
    board.configure(f'[profiles.stuck]\nmodel = "{spec}"\ntimeout_s = 1\n')
    card = int(kanban(board.path, "add", "never ends", "--profile", "stuck",
                      "--max-attempts", "1").stdout.strip().removeprefix("#"))
    kanban(board.path, "cron", "add", "hourly", "-s", "every 1h", "--goal", "g",
           "--profile", "stuck", "--max-attempts", "1")
    fired = json.loads(kanban(board.path, "cron", "run", "hourly", "--json").stdout)["card_id"]
    assert kanban(board.path, "dispatch", "--once", check=False).returncode == 4
    for ran in (card, fired):
        assert query(board.path, "SELECT c.status, r.outcome FROM card c JOIN run r ON "
                                 "r.card_id = c.id WHERE c.id = ?", ran) == [
            ("failed", "timed_out")]


def test_lease_expiry_kills_a_frozen_worker_before_requeue(board: BoardFiles,
                                                           tmp_path: Path) -> None:
    # Work long enough (4 s) and a lease roomy enough (2 s) that on a busy machine the
    # worker is still alive and holding its lease when the test freezes it.
    spec = board.script("slow", slow_steps(0.5, heartbeats=8))
    board.configure(f'[limits]\nlease_s = 2.0\n[profiles.default]\nmodel = "{spec}"\n')
    card = board.add("freezes once")
    d = start_dispatcher(board.path, "--max-workers", "1", log=tmp_path / "d.log")
    try:
        pid = wait_until(lambda: _a_live_worker(board.path), timeout=60, what="a worker")
        # at work: its model was called (a worker frozen before that is the host's fault,
        # handed back with no attempt spent: tests/security/test_free_retries.py)
        wait_until(lambda: query(board.path, "SELECT count(*) FROM message m JOIN run r ON "
                                             "r.id = m.run_id WHERE r.card_id = ?", card)
                   != [(0,)], timeout=60, what="the worker's first message")
        # alive but silent: no heartbeats. The group, or the process itself when the test
        # looks in the instant between its fork and its setsid (as the dispatcher does).
        assert signal_group(pid, signal.SIGSTOP)
        wait_until(lambda: query(board.path, "SELECT status FROM card WHERE id = ?", card)
                   == [("done",)], timeout=60, what="the card done on a second attempt")
    finally:
        stop(d)
    outcomes = query(board.path, "SELECT outcome FROM run WHERE card_id = ? ORDER BY id", card)
    assert outcomes == [("lease_lost",), ("completed",)]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the frozen worker was killed, not left beside the new one


def test_cancel_kills_the_running_worker(board: BoardFiles, tmp_path: Path) -> None:
    spec = board.script("slow", slow_steps(1.0, heartbeats=30))
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')
    card = board.add("to cancel")
    d = start_dispatcher(board.path, "--max-workers", "1", log=tmp_path / "d.log")
    try:
        pid = wait_until(lambda: _a_live_worker(board.path), timeout=60, what="a worker")
        workers = kanban(board.path, "workers", "--json").stdout
        assert f'"pid": {pid}' in workers
        kanban(board.path, "cancel", str(card))
        wait_until(lambda: not _alive(pid), timeout=30, what="the worker killed")
    finally:
        stop(d)
    assert query(board.path, "SELECT status FROM card WHERE id = ?", card) == [("cancelled",)]
    assert query(board.path, "SELECT outcome FROM run WHERE card_id = ?", card) == [
        ("cancelled",)]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_worker_environment_is_scrubbed(board: BoardFiles, tmp_path: Path) -> None:
    spec = board.script("slow", slow_steps(1.0, heartbeats=30))
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')
    card = board.add("env check")
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-secret", "AWS_SECRET_ACCESS_KEY": "x",
           "ANTHROPIC_API_KEY": "sk-ant-secret"}
    d = start_dispatcher(board.path, "--max-workers", "1", "--cold", env=env,
                         log=tmp_path / "d.log")
    try:
        pid = wait_until(lambda: _a_live_worker(board.path), timeout=60, what="a worker")
        environ = dict(item.split("=", 1) for item in
                       Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
        kanban(board.path, "cancel", str(card))
    finally:
        stop(d)
    assert environ["KANBAN_CARD"] == str(card)
    assert environ["KANBAN_BOARD"] == "default"
    assert {"KANBAN_DB", "KANBAN_CLAIM_TOKEN", "KANBAN_RUN", "PATH", "HOME"} <= environ.keys()
    for secret in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY"):
        assert secret not in environ
