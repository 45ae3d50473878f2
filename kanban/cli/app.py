"""The `kanban` command: the root group, its lazily loaded commands, and `main()`.

Start-up is part of the interface: `kanban --help` imports no command, and each command
imports only what it needs (the dispatcher, the agent runtime and Rich load on demand).
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from kanban import __version__
from kanban.cli import output
from kanban.cli.base import CliState, global_params
from kanban.cli.commands import COMMANDS
from kanban.cli.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, exit_code_for

HELP = """A SQLite-backed kanban board whose cards are worked by agents.

Start with `kanban init`, add cards with `kanban add`, run `kanban dispatch` to work them,
and watch with `kanban board`. The global options work before or after a command."""


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        output.out(f"kanban {__version__}")
        ctx.exit(0)


class RootGroup(click.Group):
    """The root: commands come from the static table and load on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, _, attr = entry.target.partition(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def resolve_command(self, ctx: click.Context, args: list[str],
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            close = difflib.get_close_matches(name, COMMANDS, n=1)
            hint = f"; did you mean `kanban {close[0]}`?" if close else ""
            raise click.UsageError(f"no command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, entry.help) for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        output.reset()
        extra.setdefault("obj", CliState())
        return super().make_context(info_name, args, parent=parent, **extra)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> NoReturn:
        """Run, then exit: errors are one stderr line; Ctrl-C exits 130."""
        try:
            code = super().main(args, prog_name or "kanban", complete_var,
                                standalone_mode=False, **extra)
            sys.stdout.flush()
        except SystemExit as exc:  # click's own exit on a closed pipe: made quiet and clear
            if not _stdout_closed():
                raise
            _silence_stdout()
            code = EXIT_BROKEN_PIPE if exc.code == 1 else exc.code
        except (KeyboardInterrupt, click.Abort) as exc:  # click has ended the line already
            signalled = exc.__cause__ if isinstance(exc, click.Abort) else exc  # click wraps it
            code = getattr(signalled, "exit_code", EXIT_INTERRUPTED)  # kanban.signals: 128+sig
        except (BrokenPipeError, output.PipeClosed):
            _silence_stdout()
            code = EXIT_BROKEN_PIPE
        except Exception as exc:
            signalled = _interrupt_behind(exc)
            code = exit_code_for(exc) if signalled is None else \
                getattr(signalled, "exit_code", EXIT_INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C an error stands for: Python wraps one raised in a class body's
    `__set_name__` (a dataclass's field) in a RuntimeError."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__
    return None


def _stdout_closed() -> bool:
    return "PacifyFlushWrapper" in type(sys.stdout).__name__  # click: EPIPE was met


def _silence_stdout() -> None:
    """After the reader closed the pipe: make the interpreter's final flush harmless."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


@click.group(cls=RootGroup, name="kanban", help=HELP, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Print the version and exit.")
@click.pass_context
def app(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        output.out(ctx.get_help())


app.params.extend(global_params())


def main(argv: Sequence[str] | None = None) -> None:
    """The console script."""
    app.main(args=argv, prog_name="kanban")


if __name__ == "__main__":
    main()
