"""Every command and every option explains itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main
from typer.core import TyperGroup
from typer.testing import CliRunner

from kanban.cli.app import app

EXPECTED = {"init", "add", "board", "list", "show", "log", "comment", "link", "unlink", "block",
            "unblock", "complete", "cancel", "retry", "archive", "pause", "resume", "status",
            "boards", "boards list", "boards create"}


def walk(command: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, command
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from walk(sub, f"{path} {name}".strip())


def test_every_command_and_option_has_help() -> None:
    commands = dict(walk(typer.main.get_command(app)))
    assert set(commands) >= EXPECTED
    for path, command in commands.items():
        assert (command.help or "").strip(), f"`kanban {path}` has no help"
        for param in command.params:
            assert (getattr(param, "help", None) or "").strip(), \
                f"`kanban {path}`: {param.name} has no help"


def test_help_renders_for_every_command() -> None:
    runner = CliRunner()
    for path in EXPECTED:
        result = runner.invoke(app, [*path.split(), "--help"])
        assert result.exit_code == 0, (path, result.stderr)
        assert "Usage" in result.stdout
