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


def test_every_file_and_folder_counts_and_the_walk_stops_past_the_file_bound(
        tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"d{i}").mkdir()
        for j in range(10):
            (tmp_path / f"d{i}" / f"empty{j}").touch()  # no disk at all, an inode each
    os.link(tmp_path / "d0" / "empty0", tmp_path / "again")  # one inode, counted once
    whole = budget.measure(tmp_path)
    assert whole.files == 1 + 30 + 300
    assert budget.measure(tmp_path, budget.Usage(-1, 50)).files <= 51 + 10


def test_a_workspace_past_its_file_limit_is_over_and_takes_no_new_file(tmp_path: Path) -> None:
    bench = Workbench(tmp_path, profile=Profile(max_workspace_files=100))
    for i in range(98):
        (tmp_path / f"f{i}").touch()  # 99 with the workspace itself
    assert budget.over(bench) is None
    assert budget.write_refusal(bench, None, 10) is None
    (tmp_path / "one more").touch()
    (tmp_path / "and another").touch()
    reason = budget.over(bench)
    assert reason is not None and "max_workspace_files" in reason and "100" in reason
    refused = budget.write_refusal(bench, None, 10)
    assert refused is not None and "max_workspace_files" in refused.content
    assert budget.write_refusal(bench, os.lstat(tmp_path / "f1"), 10) is None  # no new inode
    assert budget.command_room(bench) == 0
