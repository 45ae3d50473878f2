"""A stop that runs out of time writes every thread's stack beside the workers' logs. The
file's name is predictable (the dispatcher's pid), so a link planted under it must not
turn that write into an overwrite of another file of the user's."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from kanban.dispatcher.stopping import Stopping


def _stopping(home: Path) -> Stopping:
    stopping = Stopping()
    stopping.home = home
    (home / "logs").mkdir(mode=0o700)
    return stopping


def test_the_stacks_go_to_a_private_file_of_their_own(tmp_path: Path) -> None:
    path = _stopping(tmp_path)._record_stacks()
    assert path == tmp_path / "logs" / f"stop-overdue-{os.getpid()}.txt"
    assert path.stat().st_mode & 0o777 == 0o600
    assert "test_the_stacks_go_to_a_private_file_of_their_own" in path.read_text()


def test_a_link_planted_where_the_stacks_go_is_not_followed(tmp_path: Path) -> None:
    stopping = _stopping(tmp_path)
    precious = tmp_path / "precious"
    precious.write_text("the user's own\n")
    planted = tmp_path / "logs" / f"stop-overdue-{os.getpid()}.txt"
    planted.symlink_to(precious)
    assert stopping._record_stacks() is None
    assert precious.read_text() == "the user's own\n"
    assert planted.is_symlink()


def test_a_hard_link_planted_where_the_stacks_go_is_left_alone(tmp_path: Path) -> None:
    """A second name of another file (same user, same filesystem) is not truncated."""
    stopping = _stopping(tmp_path)
    precious = tmp_path / "precious"
    precious.write_text("the user's own\n")
    os.link(precious, tmp_path / "logs" / f"stop-overdue-{os.getpid()}.txt")
    assert stopping._record_stacks() is None
    assert precious.read_text() == "the user's own\n"


def test_a_fifo_planted_where_the_stacks_go_does_not_hang_the_watchdog(
        tmp_path: Path) -> None:
    """Opening a FIFO for writing waits for a reader: the watchdog whose whole job is to
    end a hung stop would hang on it. Here it refuses at once."""
    stopping = _stopping(tmp_path)
    os.mkfifo(tmp_path / "logs" / f"stop-overdue-{os.getpid()}.txt")
    done = threading.Event()
    results: list[Path | None] = []

    def record() -> None:
        results.append(stopping._record_stacks())
        done.set()

    threading.Thread(target=record, daemon=True).start()
    assert done.wait(30), "writing the stacks blocked on a FIFO"
    assert results == [None]


def test_a_file_left_by_an_earlier_process_is_made_private_again(tmp_path: Path) -> None:
    stopping = _stopping(tmp_path)
    left = tmp_path / "logs" / f"stop-overdue-{os.getpid()}.txt"
    left.write_text("an older process's stacks, much longer than these will be\n" * 500)
    left.chmod(0o644)
    assert stopping._record_stacks() == left
    assert left.stat().st_mode & 0o777 == 0o600
    assert "older process" not in left.read_text()
