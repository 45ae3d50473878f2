"""What every command shares: the global options (accepted before or after the command
name), the per-invocation state they fill, and the click classes that add them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from kanban.cli import output

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


def _remember(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None or value is False:
            return  # not given here: keep what an earlier position set
        setattr(state_of(ctx), attr, value)
        if attr == "utc":
            output.Settings.utc = True

    return store


def _complete_boards(ctx: click.Context, param: click.Parameter,
                     incomplete: str) -> list[Any]:
    from kanban.cli.completion import boards

    return boards(ctx, incomplete)


def global_params() -> list[click.Parameter]:
    """--db, --board and --utc: one definition, attached to the root and every command."""
    return [
        click.Option(
            ["--db"], metavar="PATH|URL", expose_value=False, callback=_remember("db_arg"),
            help="The database: a file, or a postgresql:// URL (default: $KANBAN_DB, else the "
                 "nearest .kanban/kanban.db above the current directory).")
        ,
        click.Option(
            ["--board", "-b"], metavar="NAME", expose_value=False,
            callback=_remember("board_arg"), shell_complete=_complete_boards,
            help=f"The board to act on (default: ${BOARD_ENV}, else '{DEFAULT_BOARD}'); "
                 "commands over every board take it as a filter."),
        click.Option(
            ["--utc"], is_flag=True, default=False, expose_value=False,
            callback=_remember("utc"),
            help="Show times in UTC (default: local time with its UTC offset)."),
    ]


class KanbanCommand(click.Command):
    """A command that also accepts the global options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", {"help_option_names": ["-h", "--help"]})
        super().__init__(*args, **kwargs)
        self.params.extend(global_params())


class KanbanGroup(click.Group):
    """A command group (`boards`, `cron`) whose commands accept the global options."""

    command_class = KanbanCommand

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", {"help_option_names": ["-h", "--help"]})
        super().__init__(*args, **kwargs)
        self.params.extend(global_params())


def command(name: str | None = None, **kwargs: Any) -> Callable[[Callable[..., Any]],
                                                                  KanbanCommand]:
    """`@command()`: a click command with the global options."""
    return click.command(name, cls=KanbanCommand, **kwargs)


def group(name: str | None = None, **kwargs: Any) -> Callable[[Callable[..., Any]], KanbanGroup]:
    return click.group(name, cls=KanbanGroup, **kwargs)


json_option = click.option("--json", "as_json", is_flag=True, default=False,
                           help="Print JSON instead of text.")


# -- the board, the database and the config a command works on --------------------------------


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
    return state.kanban


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
