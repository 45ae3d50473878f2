"""What every command shares: the global options (accepted before or after the command
name) and the click classes that add them. The state they fill, and the board, database and
config a command works on, are kanban.cli.context's (re-exported here for the commands)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from kanban.cli import output
from kanban.cli.context import BOARD_ENV, DEFAULT_BOARD, state_of
from kanban.cli.context import CliState as CliState
from kanban.cli.context import board_filter as board_filter
from kanban.cli.context import board_of as board_of
from kanban.cli.context import config_of as config_of
from kanban.cli.context import config_path as config_path
from kanban.cli.context import location_of as location_of
from kanban.cli.context import open_kanban as open_kanban
from kanban.cli.context import require_skills as require_skills
from kanban.cli.context import require_worktree_repository as require_worktree_repository


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
    from kanban.cli.completion import boards  # here: only completing pays for click's module

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
