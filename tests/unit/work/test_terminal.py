"""The terminal toolset outside a worker: output, caps, environment, deadline, policy."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from kanban.tools.workbench import Workbench, command_env
from tests.unit.work.conftest import call, ok, refused


def test_exit_code_and_output_reach_the_model(bench: Workbench, workspace: Path) -> None:
    shown = ok(bench, "terminal", command="echo out; echo err >&2; pwd; exit 4")
    assert shown.splitlines() == ["exit code 4", "output (" + f"{8 + len(str(workspace)) + 1}"
                                  " bytes):", "out", "err", str(workspace)]
    assert not (workspace / ".kanban-outputs").exists() or not any(
        (workspace / ".kanban-outputs").iterdir())  # short outputs are not kept


def test_a_long_output_keeps_head_and_tail_and_is_saved_whole(bench: Workbench,
                                                              workspace: Path) -> None:
    shown = ok(bench, "terminal", command="seq 1 5000")
    assert shown.startswith("exit code 0\n") and "\n1\n2\n" in shown and "5000" in shown
    saved = next((workspace / ".kanban-outputs").iterdir())
    assert f"whole output in .kanban-outputs/{saved.name}" in shown
    assert saved.read_text().splitlines() == [str(n) for n in range(1, 5001)]
    assert str(workspace) not in shown  # named relative to the workspace


def test_a_planted_output_folder_symlink_does_not_carry_the_output_out(
        bench: Workbench, workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ok(bench, "terminal", command=f"ln -s {outside} .kanban-outputs")
    shown = ok(bench, "terminal", command="seq 1 5000")
    assert "\n1\n2\n" in shown and "whole output in nowhere" in shown
    assert not any(outside.iterdir())
    assert bench._private is None or not bench._private.exists()  # nothing left behind


def test_commands_get_no_credentials_and_no_claim(workspace: Path) -> None:
    worker = {"PATH": "/usr/bin:/bin", "HOME": "/home/x", "OPENAI_API_KEY": "sk-secret-1",
              "ANTHROPIC_BASE_URL": "http://x", "KANBAN_CLAIM_TOKEN": "tok", "KANBAN_DB": "db",
              "KANBAN_CARD": "7", "GITHUB_TOKEN": "ghp-2", "SEARCH_KEY": "k"}
    env = command_env(worker, workspace, drop=("SEARCH_KEY",))
    assert sorted(env) == ["GIT_PAGER", "GIT_TERMINAL_PROMPT", "HOME", "KANBAN_CARD",
                           "KANBAN_WORKSPACE", "PAGER", "PATH", "TERM"]
    bench = Workbench(workspace=workspace, env=env)
    shown = ok(bench, "terminal", command="env")
    assert "sk-secret-1" not in shown and "tok" not in shown.split("KANBAN")[0]
    assert f"KANBAN_WORKSPACE={workspace}" in shown


def test_the_card_deadline_bounds_a_command(bench: Workbench) -> None:
    bench.deadline = time.monotonic() + 2.0
    started = time.monotonic()
    result = call(bench, "terminal", command="sleep 30", timeout_s=600)
    assert result.is_error and "timed out" in result.content
    assert time.monotonic() - started < 10
    bench.deadline = time.monotonic() + 0.2
    assert "no time left" in refused(bench, "terminal", command="true")


def test_dangerous_commands_obey_the_mode_outside_a_worker(bench: Workbench,
                                                          workspace: Path) -> None:
    message = refused(bench, "terminal", command="echo hi > marker; git push --force")
    assert "dangerous-command rule 'force push'" in message
    assert not (workspace / "marker").exists()
    allowed = dataclasses.replace(bench, approval="allow")
    assert "exit code" in ok(allowed, "terminal", command="echo hi > marker; git push --force")
    assert (workspace / "marker").read_text() == "hi\n"


def test_profile_patterns_add_to_the_built_in_rules(bench: Workbench) -> None:
    strict = dataclasses.replace(bench, profile=dataclasses.replace(
        bench.profile, dangerous_patterns=(r"\bpip\s+install\b",)))
    assert "profile pattern" in refused(strict, "terminal", command="pip install requests")
    assert "exit code 0" in ok(bench, "terminal", command="echo pip install")
