"""Row 9: tool round trips, as a worker's agent makes them, against the bare operation.

9.1 `terminal("true")` through the toolbox (argument check, dangerous-command rules, the
runner's process group, prlimit and timeout wrappers, output file, result text) against
`subprocess.run(["bash", "-c", "true"])`. 9.2 `write_file` then `read_file` of a small file
(confinement, atomic write, text checks, numbered lines) against pathlib's write and read.
9.5 the same `terminal("true")` inside the bubblewrap sandbox a card gets (one per card,
its exec server forking each command), against 9.1: the sandbox's cost per command (goal:
within 2x). 9.6 a sandbox's start on a network of its own against one on the host's.
Skipped where bwrap (for 9.6, slirp4netns) cannot start.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import Sizes, median
from bench.report import Goal, Row
from kanban.agent.types import ToolCall
from kanban.state.config import Profile
from kanban.tools.catalog import REGISTRY
from kanban.tools.hostview import own_interpreter
from kanban.tools.runner import CommandSpec
from kanban.tools.sandbox import SandboxPolicy, check_sandbox, own_network
from kanban.tools.sandbox_runner import BwrapRunner
from kanban.tools.workbench import Workbench, command_env

CALLS = {"full": 300, "quick": 100, "smoke": 5}
TEXT = "".join(f"line {n} of a small file\n" for n in range(40))


def timed(action: Callable[[], object], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def run(sizes: Sizes, work: Path) -> list[Row]:
    workspace = work / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    bench = Workbench(workspace=workspace, profile=Profile(), approval="deny",
                      env=command_env({"PATH": os.environ["PATH"]}, workspace))
    box = REGISTRY.toolbox(["terminal", "file"], contexts={"terminal": bench, "file": bench})
    count = CALLS.get(sizes.name, 100)

    def terminal() -> None:
        result = box.call(ToolCall("b", "terminal", json.dumps({"command": "true"})))
        assert result.content.startswith("exit code 0"), result.content

    def bare() -> None:
        subprocess.run(["bash", "--noprofile", "--norc", "-c", "true"], cwd=workspace,
                       env=bench.env, check=True, stdin=subprocess.DEVNULL)

    def files() -> None:
        box.call(ToolCall("w", "write_file", json.dumps({"path": "f.txt", "content": TEXT})))
        result = box.call(ToolCall("r", "read_file", json.dumps({"path": "f.txt"})))
        assert not result.is_error, result.content

    def bare_files() -> None:
        (workspace / "g.txt").write_text(TEXT)
        (workspace / "g.txt").read_text()

    terminal()
    bare()  # warm the page cache and the tools' imports before timing
    term, base = [], []
    for _ in range(3):  # interleaved, against drift
        term += timed(terminal, count // 3 or 1)
        base += timed(bare, count // 3 or 1)
    file_ms, bare_file_ms = timed(files, count), timed(bare_files, count)
    return [*_rows(term, base, file_ms, bare_file_ms, count),
            *_sandboxed(work, workspace, count, median(term)),
            *_own_network(workspace, max(5, count // 10))]


def _sandboxed(work: Path, workspace: Path, count: int, plain_ms: float) -> list[Row]:
    """9.5: terminal("true") through the card's sandbox, against the plain runner (9.1)."""
    if not check_sandbox().available:
        return []
    home = work / "card-home"
    home.mkdir(exist_ok=True)
    policy = SandboxPolicy(writable=(workspace,), hidden=(work / "board",), network=False,
                           home=home, readable=own_interpreter())  # as card_policy
    runner = BwrapRunner(policy)
    bench = Workbench(workspace=workspace, profile=Profile(), approval="deny",
                      env=command_env({"PATH": os.environ["PATH"]}, workspace), runner=runner)
    box = REGISTRY.toolbox(["terminal"], contexts={"terminal": bench})

    def terminal() -> None:
        result = box.call(ToolCall("s", "terminal", json.dumps({"command": "true"})))
        assert result.content.startswith("exit code 0"), result.content

    try:
        terminal()
        samples = timed(terminal, count)
    finally:
        runner.close()  # the card's sandbox ends with the card (it outlived the bench run)
    return [Row("9.5", "terminal tool round trip in the sandbox (`true`)", "ms",
                median(samples), plain_ms, "9.1 (plain runner)", Goal("ratio", "<=", 2.0),
                f"median of {len(samples)} calls: one bwrap per card, network off, system view")]


def _own_network(workspace: Path, count: int) -> list[Row]:
    """9.6: a sandbox started for one command (`true`) on a network of its own (slirp4netns,
    the routes that keep this host's services out), against one on the host's network: what
    `network = true` adds to each card's sandbox, MCP server, and to each command where the
    card's shared sandbox is gone."""
    if not check_sandbox().available or not own_network().available:
        return []
    runs = {}
    for own in (False, True):
        policy = SandboxPolicy(writable=(workspace,), readable=own_interpreter(),
                               own_network=own)
        runner = BwrapRunner(policy, session=False)
        spec = CommandSpec.shell("true", cwd=workspace, env={"PATH": os.environ["PATH"]},
                                 output_path=workspace.parent / "own-network.out", timeout_s=30.0)
        runs[own] = timed(lambda runner=runner, spec=spec: runner.run(spec), count)
    return [Row("9.6", "a sandbox's start, network of its own (`true`)", "ms",
                median(runs[True]), median(runs[False]), "the same on the host's network",
                None, f"median of {count} starts: a bwrap per command, no shared sandbox")]


def _rows(term: list[float], base: list[float], file_ms: list[float],
          bare_file_ms: list[float], count: int) -> list[Row]:
    return [
        Row("9.1", "terminal tool round trip (`true`)", "ms", median(term), median(base),
            "subprocess.run(bash -c true)", Goal("value", "<=", 25, "ms"),
            f"median of {len(term)} calls: runner with prlimit and timeout wrappers"),
        Row("9.2", "write_file + read_file round trip (1 KB)", "ms", median(file_ms),
            median(bare_file_ms), "pathlib write_text + read_text", None,
            f"median of {count} pairs"),
    ]
