"""`kanban run --swarm` and `kanban swarm`: real dispatcher and worker processes on the
scripted model; the synthesizer's answer ends the run, after a verifier that ran after
every worker."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.procs import kanban, query, start_dispatcher, stop, wait_until

GOAL = "Compare three SQLite journal modes"


def runs(board: BoardFiles, created_by: str) -> list[tuple[datetime, datetime]]:
    rows = query(board.path, "SELECT r.started_at, r.finished_at FROM run r JOIN card c "
                             "ON c.id = r.card_id WHERE c.created_by = ? ORDER BY c.id",
                 created_by)
    return [(datetime.fromisoformat(a), datetime.fromisoformat(b)) for a, b in rows]


def test_run_swarm_answers_with_the_synthesizers_result(board: BoardFiles) -> None:
    done = kanban(board.path, "run", "--swarm", GOAL, "--workers", "3")
    (synth_id, answer), = query(board.path, "SELECT id, result FROM card "
                                            "WHERE created_by = 'swarm:synthesizer'")
    assert done.stdout.rstrip().endswith(answer)
    assert answer == f"Done: Answer the goal: {GOAL}"
    statuses = query(board.path, "SELECT created_by, status FROM card ORDER BY id")
    assert [by for by, _ in statuses] == ["swarm:planner", *["swarm:worker"] * 3,
                                          "swarm:verifier", "swarm:synthesizer"]
    assert {status for _, status in statuses} == {"done"}
    (verify_start, verify_end), = runs(board, "swarm:verifier")
    for _, worker_end in runs(board, "swarm:worker"):
        assert verify_start >= worker_end  # the verifier ran after every worker
    (synth_start, _), = runs(board, "swarm:synthesizer")
    assert synth_start >= verify_end


def test_given_parts_and_a_running_dispatcher(board: BoardFiles, tmp_path: Path) -> None:
    slow = board.script("slow", slow_steps(0.2, 1))
    board.configure(f'[profiles.slow]\nmodel = "{slow}"\n')
    created = kanban(board.path, "swarm", GOAL, "--part", "WAL", "--part", "DELETE",
                     "--profile", "slow", "--json").stdout
    assert '"planner": null' in created
    d = start_dispatcher(board.path, "--max-workers", "2", log=tmp_path / "d.log")
    try:
        wait_until(lambda: query(board.path, "SELECT status FROM card WHERE created_by = "
                                             "'swarm:synthesizer'") == [("done",)],
                   timeout=60, what="the synthesizer")
    finally:
        stop(d)
    workers = runs(board, "swarm:worker")
    (verify_start, _), = runs(board, "swarm:verifier")
    assert len(workers) == 2 and all(verify_start >= end for _, end in workers)
    # Both workers ran at once: each started before the other finished.
    (a_start, a_end), (b_start, b_end) = workers
    assert a_start < b_end and b_start < a_end


def test_a_failed_worker_stops_the_swarm_with_its_reason(board: BoardFiles) -> None:
    missing = board.home / "no-such-script.json"
    board.configure(f'[profiles.broken]\nmodel = "scripted:{missing}"\n')
    done = kanban(board.path, "swarm", GOAL, "--part", "a", "--profile", "broken",
                  "--follow", check=False)
    assert done.returncode == 4  # a card it relied on failed (kanban/cli/exit_codes.py)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("kanban: error: swarm #3 stopped: #1 (Part 1 of 1: a) is failed")
    assert "cannot read script file" in last
    # What waits on the failed worker (the verifier, then the synthesizer) is blocked, saying
    # why, rather than left in todo.
    assert query(board.path, "SELECT status FROM card ORDER BY id") == [
        ("failed",), ("blocked",), ("blocked",)]
    reasons = query(board.path, "SELECT error FROM card WHERE id > 1 ORDER BY id")
    assert all("#1" in reason for reason, in reasons), reasons


def test_following_a_paused_board_says_so(board: BoardFiles) -> None:
    kanban(board.path, "pause", "--board", "default")
    done = kanban(board.path, "run", "--swarm", GOAL, "--part", "a", check=False)
    assert done.returncode == 1
    assert "stopped: spawning is paused" in done.stderr
    assert query(board.path, "SELECT count(*) FROM card WHERE status = 'ready'") == [(1,)]
