"""Every failure of a command becomes one line on stderr and an exit code."""

from __future__ import annotations

import os
import sys

import click

from kanban.state.errors import KanbanError
from kanban.textsafety import visible_line

PREFIX = "kanban: error:"
DEBUG_ENV = "KANBAN_DEBUG"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader went away (`kanban list --all | head`)


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def report(message: str) -> None:
    sys.stderr.write(visible_line(f"{PREFIX} {one_line(message)}") + "\n")
    sys.stderr.flush()


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def exit_code_for(exc: BaseException) -> int:
    """Print `exc` as one line and return its exit code (re-raise under KANBAN_DEBUG)."""
    if isinstance(exc, KanbanError):
        report(exc.message)
        return exc.exit_code
    if isinstance(exc, click.ClickException):
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
