"""What kills part of the dispatcher never burns the queue: a SIGKILLed worker forkserver is
replaced and its cards run again; a dispatcher SIGKILLed in its first second is followed by
one that requeues its cards at once, spending no attempt, and nothing prints a traceback."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.procs import query, start_dispatcher, stop, wait_until


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def forkserver_of(dispatcher_pid: int) -> int | None:
    for child in children(dispatcher_pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"kanban.worker.forkserver" in cmdline:
            return child
    return None


def running(db: Path) -> int:
    return int(query(db, "SELECT count(*) FROM card WHERE status = 'running'")[0][0])


def started(db: Path) -> int:
    """Workers the dispatcher has started (their pids recorded), not just claims."""
    return int(query(db, "SELECT count(*) FROM run WHERE pid IS NOT NULL AND finished_at "
                         "IS NULL")[0][0])


def all_done(db: Path, n: int) -> bool:
    return query(db, "SELECT count(*) FROM card WHERE status = 'done'") == [(n,)]


def assert_no_attempt_spent(db: Path) -> None:
    assert query(db, "SELECT id FROM card WHERE attempt - retry_base != 1") == []
    assert query(db, "SELECT count(*) FROM card WHERE status != 'done'") == [(0,)]


def test_a_killed_forkserver_is_replaced_and_its_cards_run_again(board: BoardFiles,
                                                                  tmp_path: Path) -> None:
    spec = board.script("slow", slow_steps(0.3, heartbeats=2))
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')
    ids = [board.add(f"card {n}") for n in range(8)]
    log = tmp_path / "dispatcher.log"
    d = start_dispatcher(board.path, "--max-workers", "2", log=log)
    try:
        wait_until(lambda: running(board.path) == 2, timeout=60, what="two workers")
        first = wait_until(lambda: forkserver_of(d.pid), timeout=30, what="the forkserver")
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: (forkserver_of(d.pid) or first) != first, timeout=30,
                   what="a new forkserver")
        wait_until(lambda: all_done(board.path, len(ids)), timeout=120, interval=0.2,
                   what="every card done")
        assert d.poll() is None, log.read_text()
    finally:
        code = stop(d)
    text = log.read_text()
    assert code == 0, text
    assert f"the worker forkserver (pid {first}) killed by signal 9" in text
    assert "Traceback" not in text
    assert_no_attempt_spent(board.path)
    # Its workers' cards, and any claim it was starting a worker for as it died, went back.
    handed = [e for (e,) in query(board.path, "SELECT error FROM run WHERE outcome = "
                                               "'handed_back'")]
    assert handed
    assert all(e == "its worker forkserver died"
               or e.startswith("worker did not start: the worker forkserver") for e in handed)


def test_a_dispatcher_killed_in_its_first_second_is_followed_at_once(board: BoardFiles,
                                                                      tmp_path: Path) -> None:
    spec = board.script("slow", slow_steps(0.3, heartbeats=2))
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')  # the default 30 s lease
    ids = [board.add(f"card {n}") for n in range(6)]
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = start_dispatcher(board.path, "--max-workers", "3", log=first_log)
    wait_until(lambda: running(board.path) > 0, timeout=60, what="a first claim")
    first.kill()
    first.wait()
    held = {card for (card,) in query(board.path, "SELECT id FROM card WHERE status = "
                                                   "'running'")}
    second = start_dispatcher(board.path, "--max-workers", "3", log=second_log)
    try:
        # Long before the 30 s leases run out, the dead instance's cards are back.
        wait_until(lambda: all_done(board.path, len(ids)), timeout=25, interval=0.1,
                   what="every card done, well within the first claims' lease")
    finally:
        code = stop(second)
    assert code == 0, second_log.read_text()
    assert_no_attempt_spent(board.path)
    # Each card the dead one held was either finished by its orphaned worker before the new
    # dispatcher looked, or handed back by the new one at once: never left to its lease.
    handed = query(board.path, "SELECT card_id, error FROM run WHERE outcome = 'handed_back'")
    finished_by_orphans = {card for (card,) in query(
        board.path, "SELECT card_id FROM run WHERE outcome = 'completed' AND attempt = 1 AND "
                    "dispatcher_id = (SELECT min(id) FROM dispatcher)")}
    assert {card for card, _ in handed} | finished_by_orphans >= held
    assert {card for card, _ in handed} <= held
    assert {error for _, error in handed} <= {"its dispatcher died",
                                              "its dispatcher died before a worker started"}
    assert query(board.path, "SELECT count(*) FROM run WHERE outcome = 'lease_lost'") == [(0,)]
    for path in (first_log, second_log):
        assert "Traceback" not in path.read_text(), path.read_text()


def test_a_second_sigterm_hands_running_cards_back_without_spending_attempts(
        board: BoardFiles, tmp_path: Path) -> None:
    spec = board.script("slow", slow_steps(1.0, heartbeats=20))
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')
    ids = [board.add(f"card {n}") for n in range(3)]
    log = tmp_path / "dispatcher.log"
    d = start_dispatcher(board.path, "--max-workers", "3", "--drain-timeout", "30", log=log)
    try:
        # Started workers: a signal between a claim and its worker's start finds nothing
        # to drain yet, so the dispatcher does not say it is draining.
        wait_until(lambda: started(board.path) == 3, timeout=60, what="three workers")
        d.send_signal(signal.SIGTERM)
        wait_until(lambda: "stopping:" in log.read_text(), timeout=30, what="draining")
        d.send_signal(signal.SIGTERM)
        assert d.wait(timeout=60) == 0, log.read_text()
    finally:
        if d.poll() is None:
            d.kill()
    assert query(board.path, "SELECT status, count(*) FROM card GROUP BY status") == [
        ("ready", len(ids))]
    assert query(board.path, "SELECT id FROM card WHERE attempt - retry_base != 0") == []
    assert query(board.path, "SELECT DISTINCT outcome FROM run") == [("handed_back",)]
    assert "Traceback" not in log.read_text()
