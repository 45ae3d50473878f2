"""A workspace's size budget: measured as disk taken, a hard link once, a command's room."""

from __future__ import annotations

import os
from pathlib import Path

from kanban.state.config import Profile
from kanban.tools import budget
from kanban.tools.workbench import Workbench


def test_disk_usage_counts_blocks_and_a_hard_link_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(os.urandom(200_000))
    os.link(tmp_path / "a", tmp_path / "b")
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(10**9)  # a gigabyte that takes no disk
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c").write_bytes(os.urandom(100_000))
    used = budget.disk_usage(tmp_path)
    assert 300_000 <= used < 400_000


def test_the_walk_stops_once_past_the_limit(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "f").write_bytes(os.urandom(10_000))
    assert budget.disk_usage(tmp_path, stop_above=50_000) < 200_000


def test_a_write_past_the_budget_is_refused_outside_a_worker(tmp_path: Path) -> None:
    bench = Workbench(tmp_path, profile=Profile(max_workspace_bytes=1 << 20))
    (tmp_path / "old").write_bytes(os.urandom(900_000))
    assert budget.write_refusal(bench, None, 1000) is None
    refused = budget.write_refusal(bench, None, 200_000)
    assert refused is not None and refused.is_error and "max_workspace_bytes" in refused.content
    assert budget.write_refusal(bench, os.lstat(tmp_path / "old"), 950_000) is None  # replaces it
    assert 0 < budget.command_room(bench) < 300_000
