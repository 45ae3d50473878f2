"""Every failure of a command becomes one line on stderr and an exit code."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from typer.core import TyperGroup

from state.errors import KanbanError

try:  # typer >= 0.2x vendors click and does not re-export ClickException
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer on real click
    from click.exceptions import ClickException  # type: ignore[no-redef]

PREFIX = "kanban: error:"
DEBUG_ENV = "KANBAN_DEBUG"


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def report(message: str) -> None:
    typer.echo(f"{PREFIX} {one_line(message)}", err=True)


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def exit_code_for(exc: BaseException) -> int:
    """Print `exc` as one line and return its exit code (re-raise under KANBAN_DEBUG)."""
    if isinstance(exc, KanbanError):
        report(exc.message)
        return exc.exit_code
    if isinstance(exc, ClickException):
        message = exc.format_message()
        ctx = getattr(exc, "ctx", None)
        if ctx is not None and exc.exit_code == 2:
            message = f"{message} (see `{ctx.command_path} --help`)"
        report(message)
        return exc.exit_code
    if debugging():
        raise exc
    report(f"unexpected {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)")
    return 1


@contextmanager
def one_line_errors() -> Iterator[None]:
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        raise typer.Exit(exit_code_for(exc)) from None


class KanbanGroup(TyperGroup):
    """The root group: parse and run subcommands, turning errors into one line each."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        with one_line_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with one_line_errors():
            return super().invoke(ctx)
