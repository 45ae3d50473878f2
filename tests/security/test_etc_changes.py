"""/etc changing while a worker runs: a secret written there after the worker (or the card's
sandbox) started is hidden from the next command as one there from the start is, and a
hidden file removed meanwhile does not fail every command on its missing mount point."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kanban.tools.hostview import SystemView
from kanban.tools.runner import CommandResult
from kanban.tools.sandbox_runner import BwrapRunner
from tests.support.pg import skip_or_fail
from tests.support.sandbox import card_runner, run_in, sandbox_workspace

SECRET = "etc-secret-" + uuid.uuid4().hex
Plant = Callable[[], Path]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return sandbox_workspace(tmp_path)


@pytest.fixture
def plant() -> Iterator[Plant]:
    """Writes a world-readable ssh host key into /etc/ssh (a misconfigured host, or one
    whose keys are made after boot); each is removed at the end if still there."""
    if not os.access("/etc/ssh", os.W_OK):
        skip_or_fail("cannot write a host key in /etc/ssh as this user")
    planted: list[Path] = []

    def one() -> Path:
        key = Path("/etc/ssh") / f"ssh_host_kanbantest{uuid.uuid4().hex}_key"
        key.write_text(SECRET + "\n")
        key.chmod(0o644)
        planted.append(key)
        return key

    yield one
    for key in planted:
        key.unlink(missing_ok=True)


def box(workspace: Path, *, session: bool) -> BwrapRunner:
    return card_runner(workspace, session=session)


def run(runner: BwrapRunner, workspace: Path, command: str) -> tuple[CommandResult, str]:
    return run_in(runner, workspace, command, out=f"{uuid.uuid4().hex}.txt")


@pytest.mark.parametrize("session", [True, False], ids=["card-sandbox", "bwrap-each"])
def test_a_key_written_after_the_sandbox_started_is_hidden(workspace: Path, plant: Plant,
                                                           session: bool) -> None:
    runner = box(workspace, session=session)
    try:
        first, text = run(runner, workspace, "echo $$")  # the view is read, the sandbox up
        assert first.exit_code == 0, text
        key = plant()
        result, text = run(runner, workspace, f"cat {key}; echo READ")
        assert result.exit_code == 0 and "READ" in text, text
        assert SECRET not in text
    finally:
        runner.close()


@pytest.mark.parametrize("session", [True, False], ids=["card-sandbox", "bwrap-each"])
def test_a_hidden_key_removed_meanwhile_does_not_fail_the_next_command(
        workspace: Path, plant: Plant, session: bool) -> None:
    key = plant()
    runner = box(workspace, session=session)
    try:
        first, text = run(runner, workspace, f"cat {key}; echo READ")
        assert first.exit_code == 0 and "READ" in text and SECRET not in text, text
        key.unlink()
        result, text = run(runner, workspace, "echo STILL-RUNS")
        assert result.exit_code == 0 and "STILL-RUNS" in text, text
    finally:
        runner.close()


@pytest.mark.parametrize("session", [True, False], ids=["card-sandbox", "bwrap-each"])
def test_a_key_removed_between_the_view_and_bwrap_fails_nothing(workspace: Path, plant: Plant,
                                                                session: bool) -> None:
    """The narrowest window: the view lists the key, then it goes before bwrap binds over
    it (bwrap: "Can't create file at ...: Read-only file system"): the command runs once
    more, with /etc as it is then."""
    key = plant()
    runner = box(workspace, session=session)
    wrapped: list[SystemView | None] = []

    def wrap_then_remove(argv: list[str], cwd: Path, view: SystemView | None = None
                         ) -> list[str]:
        argv = runner.policy.wrap(argv, cwd, runner.bwrap, view)
        wrapped.append(view)
        key.unlink(missing_ok=True)
        return argv

    runner.wrap = wrap_then_remove  # type: ignore[method-assign]
    try:
        result, text = run(runner, workspace, "echo RAN-ONCE")
        assert result.exit_code == 0 and text == "RAN-ONCE\n", text
        assert len(wrapped) == 2 and key in wrapped[0].hidden_files  # type: ignore[union-attr]
        assert key not in wrapped[1].hidden_files  # type: ignore[union-attr]
        if session:  # the card's sandbox started on the second try and took the command
            assert runner._session is not None and not runner._session.dead
    finally:
        runner.close()
