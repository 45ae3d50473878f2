"""What every command shares: the database (opened lazily, once) and the board name."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import typer

from kanban.service import Kanban
from state.config import Config, load_config
from state.db import open_database
from state.paths import DB_NAME, PROJECT_DIR, DbLocation, resolve_db

DEFAULT_BOARD = "default"
BOARD_ENV = "KANBAN_BOARD"


@dataclass
class CliState:
    """Set by the root callback; holds the open database for the command's lifetime."""

    db_arg: str | None = None
    kanban: Kanban | None = field(default=None, repr=False)


def state_of(ctx: typer.Context) -> CliState:
    return ctx.ensure_object(CliState)


def location_of(ctx: typer.Context) -> DbLocation:
    return resolve_db(state_of(ctx).db_arg)


def init_location(ctx: typer.Context) -> DbLocation:
    """Where `kanban init` creates: --db > KANBAN_DB > .kanban/kanban.db in the cwd."""
    state = state_of(ctx)
    if state.db_arg or os.environ.get("KANBAN_DB"):
        return resolve_db(state.db_arg)
    return DbLocation(str(Path.cwd() / PROJECT_DIR / DB_NAME), "project")


def open_kanban(ctx: typer.Context) -> Kanban:
    """The board API over the resolved database, opened on first use and closed on exit."""
    state = state_of(ctx)
    if state.kanban is None:
        location = location_of(ctx)
        fresh = location.implicit and not location.path.exists()
        db = open_database(location)
        ctx.find_root().call_on_close(db.dispose)
        state.kanban = Kanban(db)
        if fresh:  # the user-wide default database, created on first use
            state.kanban.ensure_board(DEFAULT_BOARD)
    return state.kanban


def config_of(ctx: typer.Context) -> Config:
    """config.toml next to the database (defaults when there is none)."""
    return load_config(location_of(ctx).home / "config.toml")
