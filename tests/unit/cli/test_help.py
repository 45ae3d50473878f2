"""Every command and every option explains itself; `kanban --help` loads no command."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import click
from click.testing import CliRunner

from kanban.cli.app import app
from kanban.cli.commands import COMMANDS

EXPECTED = {"init", "add", "edit", "board", "list", "show", "log", "comment", "link", "unlink",
            "block", "unblock", "complete", "cancel", "retry", "archive", "pause", "resume",
            "status", "dispatch", "workers", "run", "completion", "inbox", "boards", "boards list",
            "boards create", "cron", "cron add", "cron list"}


def walk(command: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from walk(command.get_command(ctx, name), f"{path} {name}".strip())


def test_every_command_and_option_has_help() -> None:
    commands = dict(walk(app))
    assert set(commands) >= EXPECTED
    for path, command in commands.items():
        assert (command.help or "").strip(), f"`kanban {path}` has no help"
        for param in command.params:
            if isinstance(param, click.Option):
                assert (param.help or "").strip(), f"`kanban {path}`: {param.name} has no help"


def test_the_static_table_matches_each_command() -> None:
    """`kanban --help` prints the table without importing commands: it must not drift."""
    for name, entry in COMMANDS.items():
        module, _, attr = entry.target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert command.name in (name, attr, name.replace("-", "_")), name
        first_line = (command.help or "").strip().splitlines()[0]
        assert entry.help == first_line, name


def test_help_renders_for_every_command() -> None:
    runner = CliRunner()
    for path in EXPECTED:
        result = runner.invoke(app, [*path.split(), "--help"])
        assert result.exit_code == 0, (path, result.stderr)
        assert "Usage" in result.stdout
        assert "--db" in result.stdout and "--board" in result.stdout, path


def test_root_help_imports_no_command_module() -> None:
    probe = ("import sys; from kanban.cli.app import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "loaded = sorted(m for m in sys.modules if m.startswith('kanban.cli.') or "
             "m.split('.')[0] in ('rich', 'sqlite3') or m.startswith('kanban.service'))\n"
             "print('LOADED', loaded, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True,
                          check=True)
    loaded = done.stderr.split("LOADED", 1)[1]
    assert "kanban.cli.commands" in loaded
    for heavy in ("kanban.cli.cards", "kanban.cli.cron", "rich", "kanban.service", "sqlite3"):
        assert f"'{heavy}'" not in loaded, heavy
