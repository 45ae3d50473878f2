"""The exit-code table (kanban/cli/exit_codes.py, README) for `kanban run`, `kanban swarm
--follow` and `kanban dispatch --once`: each documented case, through real processes."""

from __future__ import annotations

import signal
import subprocess

import pytest

from kanban.cli import exit_codes
from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.procs import KANBAN, kanban, query, wait_until

GOAL = "Compare three SQLite journal modes"
BROKEN = 'model = "scripted:no-such-script"\nmax_attempts = 1\n'


def _lead(board: BoardFiles, tasks: list[dict[str, str]], *, answer: bool = True) -> str:
    delegate = {"tool_calls": [{"name": "delegate", "arguments": {"tasks": tasks}}]}
    return board.script("lead", [delegate, *([{"text": "the answer"}] if answer else [])])


def _code(board: BoardFiles, *args: str) -> int:
    return kanban(board.path, *args, check=False).returncode


def test_run_exits_0_when_the_lead_answered_and_every_child_is_done(board: BoardFiles) -> None:
    assert _code(board, "run", GOAL, "--model", _lead(board, [{"title": "a", "goal": "g"}])) \
        == exit_codes.OK == 0


def test_run_exits_1_when_it_cannot_run_and_2_on_bad_usage(board: BoardFiles) -> None:
    assert _code(board, "run", GOAL, "--model", "nosuch:model") == exit_codes.ERROR == 1
    assert _code(board, "run") == exit_codes.USAGE == 2
    assert query(board.path, "SELECT count(*) FROM card") == [(0,)]


def test_run_exits_3_when_the_lead_has_no_answer(board: BoardFiles) -> None:
    board.configure("[profiles.lead]\nmax_turns = 1\n")
    spec = _lead(board, [{"title": "a", "goal": "g"}], answer=False)
    assert _code(board, "run", GOAL, "--model", spec) == exit_codes.LEAD_FAILED == 3


def test_run_exits_4_when_a_child_failed(board: BoardFiles) -> None:
    board.configure(f"[profiles.broken]\n{BROKEN}")
    spec = _lead(board, [{"title": "ok", "goal": "g"},
                         {"title": "fails", "goal": "g", "profile": "broken"}])
    assert _code(board, "run", GOAL, "--model", spec) == exit_codes.TREE_FAILED == 4


def test_run_exits_5_when_a_budget_stopped_the_lead(board: BoardFiles) -> None:
    board.configure("[profiles.lead]\ntoken_budget = 10\n")
    spec = _lead(board, [{"title": "a", "goal": "g"}])
    assert _code(board, "run", GOAL, "--model", spec) == exit_codes.BUDGET == 5


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_run_exits_128_plus_the_signal_and_leaves_nothing_running(board: BoardFiles,
                                                                  sig: int) -> None:
    slow = board.script("slow", slow_steps(1.0, heartbeats=30))
    board.configure(f'[profiles.slow]\nmodel = "{slow}"\n')
    spec = _lead(board, [{"title": "slow", "goal": "g", "profile": "slow"}])
    proc = subprocess.Popen([*KANBAN, "--db", str(board.path), "run", GOAL, "--model", spec],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_until(lambda: query(board.path, "SELECT count(*) FROM run r JOIN card c ON "
                                         "c.id = r.card_id WHERE c.parent_id IS NOT NULL AND "
                                         "r.pid IS NOT NULL")[0][0], timeout=60,
               what="the child running")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert query(board.path, "SELECT count(*) FROM card WHERE status = 'running'") == [(0,)]
    assert query(board.path, "SELECT count(*) FROM dispatcher WHERE stopped_at IS NULL") \
        == [(0,)]


def _swarm(board: BoardFiles, *profiles: str) -> int:
    return _code(board, "swarm", GOAL, "--part", "one", "--part", "two", "--follow", *profiles)


def test_swarm_follow_exits_0_3_or_4(board: BoardFiles) -> None:
    board.configure(f"[profiles.broken]\n{BROKEN}")
    assert _swarm(board) == exit_codes.OK
    assert _swarm(board, "--synthesizer", "broken") == exit_codes.LEAD_FAILED
    assert _swarm(board, "--profile", "broken") == exit_codes.TREE_FAILED


def test_dispatch_once_exits_0_or_4_by_the_cards_it_ran(board: BoardFiles) -> None:
    board.configure(f"[profiles.broken]\n{BROKEN}")
    board.add("fine")
    assert _code(board, "dispatch", "--once") == exit_codes.OK
    board.add("fails", profile="broken", max_attempts=1)
    assert _code(board, "dispatch", "--once") == exit_codes.TREE_FAILED


def test_run_exits_4_when_a_child_was_cancelled(board: BoardFiles) -> None:
    slow = board.script("slow", slow_steps(1.0, heartbeats=30))
    board.configure(f'[profiles.slow]\nmodel = "{slow}"\n')
    spec = _lead(board, [{"title": "slow", "goal": "g", "profile": "slow"}])
    proc = subprocess.Popen([*KANBAN, "--db", str(board.path), "run", GOAL, "--model", spec],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = wait_until(lambda: query(board.path, "SELECT id FROM card WHERE parent_id IS NOT "
                                                 "NULL AND status = 'running'"), timeout=60,
                       what="the child running")[0][0]
    kanban(board.path, "cancel", str(child))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == exit_codes.TREE_FAILED, err


def test_swarm_exits_1_when_it_cannot_run_and_2_on_bad_usage(board: BoardFiles) -> None:
    assert _swarm(board, "--profile", "no-such-profile") == exit_codes.ERROR
    assert _code(board, "swarm", GOAL, "--workers", "0") == exit_codes.USAGE
    assert query(board.path, "SELECT count(*) FROM card") == [(0,)]


def test_swarm_follow_exits_5_when_a_budget_stopped_a_worker(board: BoardFiles) -> None:
    board.configure("[profiles.tight]\ntoken_budget = 10\nmax_attempts = 1\n")
    assert _swarm(board, "--profile", "tight") == exit_codes.BUDGET


def test_swarm_follow_exits_130_on_ctrl_c_and_leaves_nothing_running(board: BoardFiles) -> None:
    slow = board.script("slow", slow_steps(1.0, heartbeats=30))
    board.configure(f'[profiles.slow]\nmodel = "{slow}"\n')
    proc = subprocess.Popen([*KANBAN, "--db", str(board.path), "swarm", GOAL, "--part", "one",
                             "--follow", "--profile", "slow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_until(lambda: query(board.path, "SELECT count(*) FROM run WHERE pid IS NOT NULL")[0][0],
               timeout=60, what="a worker running")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == exit_codes.INTERRUPTED, err
    assert "Traceback" not in err
    assert query(board.path, "SELECT count(*) FROM card WHERE status = 'running'") == [(0,)]


def test_dispatch_once_exits_1_2_and_5(board: BoardFiles) -> None:
    assert _code(board, "dispatch", "--once", "--max-workers", "zero") == exit_codes.USAGE
    board.configure("[profiles.tight]\ntoken_budget = 10\nmax_attempts = 1\n")
    board.add("over budget", profile="tight", max_attempts=1)
    assert _code(board, "dispatch", "--once") == exit_codes.BUDGET
    board.configure('[profiles.default]\nmax_turns = "many"\n')
    assert _code(board, "dispatch", "--once") == exit_codes.ERROR


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, exit_codes.INTERRUPTED),
                                           (signal.SIGTERM, 0), (signal.SIGHUP, 0)])
def test_a_foreground_dispatcher_exits_130_on_ctrl_c_and_0_on_sigterm_or_sighup(
        board: BoardFiles, sig: int, code: int) -> None:
    proc = subprocess.Popen([*KANBAN, "--db", str(board.path), "dispatch"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_until(lambda: query(board.path, "SELECT count(*) FROM dispatcher WHERE stopped_at "
                                         "IS NULL")[0][0], timeout=60, what="the dispatcher")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert query(board.path, "SELECT count(*) FROM dispatcher WHERE stopped_at IS NULL") \
        == [(0,)]
