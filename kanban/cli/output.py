"""Printing: data to stdout, status to stderr; plain lines unless a person is watching.

Nothing here imports Rich: commands whose output is piped never pay for it. Piped
output is never wrapped or cut; colour only reaches a terminal (and never with NO_COLOR).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from kanban.textsafety import colour, json_safe, visible_line

_ANSI = {"bold": "1", "dim": "2", "italic": "3", "red": "31", "green": "32", "yellow": "33",
         "blue": "34", "magenta": "35", "cyan": "36", "white": "37"}


class Settings:
    """Per-invocation output settings (set by the root command)."""

    utc = False


def reset(*, utc: bool = False) -> None:
    Settings.utc = utc


class PipeClosed(Exception):  # noqa: N818 (not an error: the reader is done)
    """The reader of stdout went away (`kanban board | head`): a quiet exit. Not an OSError,
    so that nothing between here and the root command turns it into another exit."""


def out(line: str = "") -> None:
    """One line of data on stdout (stored text in it cannot drive the terminal)."""
    try:
        sys.stdout.write(visible_line(line) + "\n")
    except BrokenPipeError:
        raise PipeClosed from None


def out_lines(lines: Iterable[str]) -> None:
    write = sys.stdout.write
    try:
        for line in lines:
            write(visible_line(line) + "\n")
    except BrokenPipeError:
        raise PipeClosed from None


def note(line: str) -> None:
    """One line of status on stderr (progress, footers, hints)."""
    sys.stderr.write(visible_line(line) + "\n")
    sys.stderr.flush()


def json_text(data: Any, indent: int | None = None) -> str:
    """JSON that is inert on a terminal (json escapes C0; C1 and bidi are escaped here)."""
    return json_safe(json.dumps(data, indent=indent, ensure_ascii=False, default=str))


def print_json(data: Any) -> None:
    try:
        sys.stdout.write(json_text(data, indent=2) + "\n")
    except BrokenPipeError:
        raise PipeClosed from None


def is_terminal(stream: Any = None) -> bool:
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def colour_on(stream: Any = None) -> bool:
    return is_terminal(stream) and not os.environ.get("NO_COLOR") and \
        os.environ.get("TERM") != "dumb"


def paint(text: str, style: str, *, stream: Any = None) -> str:
    """`text` in `style` ("bold red", "dim"...) when writing to a colour terminal."""
    if not style or not colour_on(stream):
        return text
    codes = ";".join(_ANSI[word] for word in style.split() if word in _ANSI)
    return f"{colour(codes)}{text}{colour('0')}" if codes else text


def when(at: datetime | None) -> str:
    """An absolute time, labelled: local time with its UTC offset, or UTC with --utc."""
    if at is None:
        return "-"
    if Settings.utc:
        return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    local = at.astimezone()
    offset = local.strftime("%z")
    return f"{local.strftime('%Y-%m-%d %H:%M:%S')} {offset[:3]}:{offset[3:]}"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def one_line(text: str) -> str:
    """Text that may hold newlines, as one line (runs of whitespace become one space)."""
    return " ".join(text.split())
