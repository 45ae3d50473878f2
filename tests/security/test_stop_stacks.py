"""A stop that runs out of time writes every thread's stack beside the workers' logs. The
file's name is predictable (the dispatcher's pid), so a link planted under it must not
turn that write into an overwrite of another file of the user's."""

from __future__ import annotations

import os
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
