"""Board commands: the board view, `boards list|create|set`, pause and resume."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import board_filter, board_of, command, group, json_option, open_kanban
from kanban.cli.params import dependency_policy_option
from kanban.states import STATUS_NAMES

if TYPE_CHECKING:
    from rich.console import RenderableType


@command()
@click.option("--status", "-s", "statuses", multiple=True, metavar="STATE",
              type=click.Choice(STATUS_NAMES, case_sensitive=False),
              help="Only this state's column (repeatable): " + ", ".join(STATUS_NAMES) + ".")
@click.option("--per-column", type=click.IntRange(1, 500), default=10, show_default=True,
              help="Cards shown per column.")
@click.option("--watch", "-w", is_flag=True,
              help="Redraw whenever the board changes (Ctrl-C to stop).")
@click.option("--interval", type=click.FloatRange(0.05, 60.0), default=0.2, show_default=True,
              help="Seconds between change checks with --watch.")
@json_option
@click.pass_context
def board(ctx: click.Context, statuses: tuple[str, ...], per_column: int, watch: bool,
          interval: float, as_json: bool) -> None:
    """Show the board: a column per state with counts, pause state and dispatchers.

    On a terminal the states are side by side; piped, each state is a block of plain
    lines (`state count`, then one line per card) with whole titles.
    """
    kanban = open_kanban(ctx)
    name = board_of(ctx)
    only = tuple(s.lower() for s in statuses)
    if as_json:
        output.print_json(kanban.board_snapshot(name, per_column=per_column,
                                                statuses=only).to_json())
        return
    if not watch and not output.is_terminal():
        from kanban.cli.board_text import board_lines

        output.out_lines(board_lines(kanban.board_snapshot(name, per_column=per_column,
                                                           statuses=only)))
        return
    from rich.console import Console

    from kanban.cli.views import render_board

    def render() -> RenderableType:
        return render_board(kanban.board_snapshot(name, per_column=per_column, statuses=only))

    console = Console(highlight=False)
    if watch:
        from kanban.cli.watch import watch as watch_loop

        watch_loop(kanban.db, render, console=console, interval=interval)  # Ctrl-C: exit 130
    else:
        console.print(render())


@group(invoke_without_command=True)
@json_option
@click.pass_context
def boards(ctx: click.Context, as_json: bool) -> None:
    """List, create and configure boards.

    Without a subcommand, lists them (--json as for `boards list`).
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_boards, as_json=as_json)


@boards.command("list")
@json_option
@click.pass_context
def list_boards(ctx: click.Context, as_json: bool = False) -> None:
    """List boards with their card counts and pause state."""
    found = open_kanban(ctx).boards()
    if as_json:
        output.print_json({"boards": found})
        return
    for b in found:
        paused = "  (spawning paused)" if b["paused"] else ""
        policy = b["on_dependency_failure"]
        settings = f"  (on dependency failure: {policy})" if policy != "block" else ""
        output.out(f"{b['name']}  {output.plural(int(str(b['cards'])), 'card')}{paused}"
                   f"{settings}")


_BOARD_POLICY_HELP = ("What the board's cards do when a dependency fails or is cancelled: "
                      "block (wait, blocked, for its retry; the default) or cancel (are "
                      "cancelled too). A card's own --on-dependency-failure wins.")


@boards.command("create")
@click.argument("name")
@dependency_policy_option(_BOARD_POLICY_HELP)
@click.pass_context
def create_board(ctx: click.Context, name: str, on_dependency_failure: str | None) -> None:
    """Create a board (boards isolate workers from each other).

    NAME: letters, digits, '.', '_' or '-'; up to 64. An existing board keeps its settings
    (change them with `kanban boards set`).
    """
    created = open_kanban(ctx).create_board(
        name, on_dependency_failure=on_dependency_failure or "block")
    output.out(f"board {name!r} {'created' if created else 'already exists'}")


@boards.command("set")
@click.argument("name", required=False)
@dependency_policy_option(_BOARD_POLICY_HELP)
@click.pass_context
def set_board(ctx: click.Context, name: str | None, on_dependency_failure: str | None) -> None:
    """Change a board's settings (NAME: the --board given, else $KANBAN_BOARD, else default)."""
    if on_dependency_failure is None:
        raise click.UsageError("nothing to change: give --on-dependency-failure", ctx)
    name = name or board_of(ctx)
    changed = open_kanban(ctx).set_dependency_policy(name, on_dependency_failure)
    verb = "now" if changed else "already"
    output.out(f"board {name!r}: on dependency failure {verb} {on_dependency_failure}")


@command()
@click.pass_context
def pause(ctx: click.Context) -> None:
    """Stop dispatchers from claiming cards; running cards go on.

    Globally, or with --board for one board.
    """
    _set_paused(ctx, True)


@command()
@click.pass_context
def resume(ctx: click.Context) -> None:
    """Let dispatchers claim cards again.

    Globally, or with --board for one board.
    """
    _set_paused(ctx, False)


def _set_paused(ctx: click.Context, paused: bool) -> None:
    """`pause` and `resume`: globally, or on the --board given."""
    name = board_filter(ctx)
    open_kanban(ctx).set_paused(paused, board=name)
    scope = f"on board {name!r}" if name else "globally"
    output.out(f"spawning {'paused' if paused else 'resumed'} {scope}")
