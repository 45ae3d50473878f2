"""The board, the database and the config a command works on: the per-invocation state the
global options fill (kanban.cli.base), and what commands and completions read from it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from kanban.service import Kanban
    from kanban.state.config import Config
    from kanban.state.paths import DbLocation

DEFAULT_BOARD = "default"
BOARD_ENV = "KANBAN_BOARD"


@dataclass
class CliState:
    """Filled by the global options wherever they appear; holds the open database."""

    db_arg: str | None = None
    board_arg: str | None = None
    utc: bool = False
    kanban: Kanban | None = field(default=None, repr=False)


def state_of(ctx: click.Context) -> CliState:
    return ctx.ensure_object(CliState)


def board_of(ctx: click.Context) -> str:
    """The one board a command acts on: --board, else $KANBAN_BOARD, else 'default'."""
    return state_of(ctx).board_arg or os.environ.get(BOARD_ENV) or DEFAULT_BOARD


def board_filter(ctx: click.Context) -> str | None:
    """For commands over every board: the --board given, else None (all boards)."""
    return state_of(ctx).board_arg


def location_of(ctx: click.Context) -> DbLocation:
    from kanban.state.paths import resolve_db

    return resolve_db(state_of(ctx).db_arg)


def open_kanban(ctx: click.Context) -> Kanban:
    """The board API over the resolved database, opened on first use and closed on exit.

    Never creates a database: only `kanban init` does."""
    from kanban.service import Kanban
    from kanban.state.db import open_database

    state = state_of(ctx)
    if state.kanban is None:
        db = open_database(location_of(ctx))
        ctx.find_root().call_on_close(db.dispose)
        state.kanban = Kanban(db)
        _refuse_second_host(state.kanban)
    return state.kanban


def _refuse_second_host(kb: Kanban) -> None:
    """A board on a network filesystem is used from one host only (see kanban.control)."""
    if getattr(getattr(kb.db, "journal", None), "network_fs", None) is None:
        return  # nearly every board: nothing more to import or read

    from kanban.control import shared_network_board
    from kanban.state.errors import DatabaseError
    from kanban.state.host import hostname

    refused = shared_network_board(kb.db, hostname(), kb.clock())
    if refused is not None:
        raise DatabaseError(refused)


def config_path(ctx: click.Context) -> str:
    from kanban.state.config import CONFIG_ENV

    return os.environ.get(CONFIG_ENV) or str(location_of(ctx).home / "config.toml")


def config_of(ctx: click.Context) -> Config:
    """$KANBAN_CONFIG, else config.toml next to the database (defaults when there is none),
    validated."""
    from kanban.state.config_file import resolve_config

    return resolve_config(location_of(ctx).home)


def require_skills(ctx: click.Context, names: Sequence[str]) -> None:
    """Refuse unknown skill names now, not when a worker starts (loads nothing for none)."""
    if names:
        from kanban.skills import load_catalog

        load_catalog(location_of(ctx).home).require(names)


def require_worktree_repository(ctx: click.Context, *workspaces: str | None) -> None:
    """A card or job whose workspace is a worktree is refused outside a git repository when
    it is added, not when a dispatcher claims its card."""
    if "worktree" in workspaces:
        from kanban.tools.worktree_lifecycle import require_repository

        require_repository(location_of(ctx).home)
