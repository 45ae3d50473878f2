"""The plain command runner: output to a file, exit codes, timeouts, groups, rlimits."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kanban.tools.runner import (
    CHECK_EVERY_S,
    CHECK_SHARE,
    CommandSpec,
    PlainRunner,
    Rlimits,
    head_tail,
    watch,
)


def spec(tmp_path: Path, command: str, **kwargs: object) -> CommandSpec:
    defaults: dict[str, object] = {"cwd": tmp_path, "env": {"PATH": os.environ["PATH"]},
                                   "timeout_s": 10.0, "output_path": tmp_path / "out.txt"}
    return CommandSpec.shell(command, **{**defaults, **kwargs})


def test_output_and_exit_code(tmp_path: Path) -> None:
    result = PlainRunner().run(spec(tmp_path, "echo hi; echo err >&2; pwd; exit 3"))
    text, cut = result.read_head_tail(1000)
    assert result.exit_code == 3 and not cut and not result.timed_out
    assert text.splitlines() == ["hi", "err", str(tmp_path)]


def test_the_environment_is_exactly_the_one_given(tmp_path: Path) -> None:
    os.environ["KANBAN_RUNNER_SECRET"] = "sk-should-not-leak"
    try:
        result = PlainRunner().run(spec(tmp_path, "env", env={"PATH": os.environ["PATH"],
                                                              "ONLY": "this"}))
    finally:
        del os.environ["KANBAN_RUNNER_SECRET"]
    text, _ = result.read_head_tail(10_000)
    assert "ONLY=this" in text and "sk-should-not-leak" not in text


def test_stdin_is_closed_unless_given(tmp_path: Path) -> None:
    closed = PlainRunner().run(spec(tmp_path, "cat; echo done"))
    assert closed.read_head_tail(100)[0] == "done\n"
    fed = PlainRunner().run(spec(tmp_path, "cat", stdin=b"fed\n"))
    assert fed.read_head_tail(100)[0] == "fed\n"


def group_members(pgid: int) -> list[int]:
    """Live, non-zombie processes whose process group is `pgid`."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def test_a_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    started = time.monotonic()
    result = PlainRunner().run(spec(tmp_path, "echo $(ps -o pgid= $$); sleep 30 & sleep 30",
                                    timeout_s=0.5))
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 5
    pgid = int(result.read_head_tail(100)[0].split()[0])
    assert group_members(pgid) == []  # the backgrounded grandchild is gone too


def test_cancel_all_stops_a_running_command(tmp_path: Path) -> None:
    runner = PlainRunner()
    threading.Timer(0.3, runner.cancel_all).start()
    started = time.monotonic()
    result = runner.run(spec(tmp_path, "sleep 30"))
    assert result.cancelled and result.exit_code is None
    assert time.monotonic() - started < 5
    assert runner.run(spec(tmp_path, "echo late")).exit_code is None  # stays cancelled


def test_file_size_limit(tmp_path: Path) -> None:
    result = PlainRunner().run(spec(
        tmp_path, "head -c 2000000 /dev/zero > big; echo $?",
        rlimits=Rlimits(file_size_bytes=100_000)))
    assert (tmp_path / "big").stat().st_size <= 100_000
    assert result.read_head_tail(1000)[0].strip() != "0"


def test_a_missing_working_directory_is_an_error_not_a_crash(tmp_path: Path) -> None:
    result = PlainRunner().run(spec(tmp_path, "true", cwd=tmp_path / "gone"))
    assert result.error and result.exit_code is None


@pytest.mark.parametrize(("size", "cut"), [(10, False), (5000, True)])
def test_head_tail(tmp_path: Path, size: int, cut: bool) -> None:
    path = tmp_path / "f"
    path.write_text("a" * (size // 2) + "b" * (size - size // 2))
    text, was_cut = head_tail(path, 100)
    assert was_cut is cut
    if cut:
        assert text.startswith("a" * 50) and text.endswith("b" * 50) and str(path) in text


class Running:
    """A command that never ends; each wait returns at once, its timeout recorded."""

    def __init__(self) -> None:
        self.pauses: list[float] = []

    def wait(self, timeout: float | None = None) -> int:
        self.pauses.append(timeout or 0.0)
        raise subprocess.TimeoutExpired("flood", timeout or 0.0)


def checks(costs: list[Callable[[], None]]) -> Callable[[], str | None]:
    """A check that does `costs[i]` on its i-th look and says stop after the last."""
    left = list(costs)

    def check() -> str | None:
        left.pop(0)()
        return None if left else "past the budget"

    return check


def burn(seconds: float) -> Callable[[], None]:
    def busy() -> None:
        began = time.thread_time()
        while time.thread_time() - began < seconds:
            pass
    return busy


def test_a_check_waiting_for_a_cpu_keeps_the_pace() -> None:
    """On a busy host a cheap check takes long on the clock: the looks must not thin out
    (they did, by its wall time, and a flood of files passed its budget by 150 MB)."""
    proc = Running()
    assert watch(proc, checks([lambda: time.sleep(0.05)] * 4), time.monotonic() + 60) \
        == "past the budget"
    assert proc.pauses[1:] == [CHECK_EVERY_S] * 3


def test_a_costly_check_is_looked_at_less_often() -> None:
    proc = Running()
    watch(proc, checks([burn(0.05)] * 3), time.monotonic() + 60)
    assert all(pause >= 0.05 / CHECK_SHARE for pause in proc.pauses[1:]), proc.pauses
