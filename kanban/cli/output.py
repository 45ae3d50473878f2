"""Printing: JSON for scripts, a Rich console for people."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def console() -> Console:
    """A console on the current stdout (resolved per call, so test runners can capture it)."""
    return Console(highlight=False)


def say(message: str) -> None:
    """A plain one-line confirmation."""
    typer.echo(message)
