"""Board commands: the board view, `boards list|create`, pause, resume and status."""

# No `from __future__ import annotations`: Typer reads these signatures at start-up and
# evaluating string annotations triples the cost of building the command tree.

import contextlib
from typing import Annotated

import typer
from rich.console import RenderableType

from kanban.cli import details, output, reads, views
from kanban.cli.context import DEFAULT_BOARD, open_kanban
from kanban.cli.params import Board, Json

boards_app = typer.Typer(help="List and create boards.", no_args_is_help=False)


@boards_app.callback(invoke_without_command=True)
def boards_group(ctx: typer.Context) -> None:
    """List and create boards."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_boards, ctx=ctx)


@boards_app.command("list")
def list_boards(ctx: typer.Context, as_json: Json = False) -> None:
    """List boards with their card counts and pause state."""
    boards = open_kanban(ctx).boards()
    if as_json:
        output.print_json({"boards": boards})
        return
    for b in boards:
        paused = "  (spawning paused)" if b["paused"] else ""
        output.say(f"{b['name']}  {b['cards']} card{'s' if b['cards'] != 1 else ''}{paused}")


@boards_app.command("create")
def create_board(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Letters, digits, '.', '_' or '-'; up to 64.",
                                        show_default=False)],
) -> None:
    """Create a board (boards isolate workers from each other)."""
    created = open_kanban(ctx).create_board(name)
    output.say(f"board {name!r} {'created' if created else 'already exists'}")


def board(
    ctx: typer.Context,
    board: Board = DEFAULT_BOARD,
    per_column: Annotated[int, typer.Option(
        min=1, max=500, help="Cards shown per column.")] = 10,
    watch: Annotated[bool, typer.Option(
        "--watch", "-w", help="Redraw whenever the board changes (Ctrl-C to stop).")] = False,
    interval: Annotated[float, typer.Option(
        min=0.05, max=60.0, help="Seconds between change checks with --watch.")] = 0.2,
    as_json: Json = False,
) -> None:
    """Show the board: a column per state with counts, pause state and dispatcher."""
    kanban = open_kanban(ctx)

    def render() -> RenderableType:
        return views.render_board(kanban.board_snapshot(board, per_column=per_column))

    if as_json:
        output.print_json(kanban.board_snapshot(board, per_column=per_column).to_json())
    elif watch:
        from kanban.cli.watch import watch as watch_loop

        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a watch ends
            watch_loop(kanban.db, render, console=output.console(), interval=interval)
    else:
        output.console().print(render())


def status(
    ctx: typer.Context,
    board: Annotated[str | None, typer.Option(
        "--board", "-b", help="Count one board only (default: all boards).",
        show_default=False)] = None,
    as_json: Json = False,
) -> None:
    """Show cards per state, the pause state and the live dispatchers."""
    summary = reads.status(open_kanban(ctx), board)
    if as_json:
        output.print_json(summary.to_json())
    else:
        output.console().print(details.status_view(summary))


PauseBoard = Annotated[str | None, typer.Option(
    "--board", "-b", help="Only this board (default: every board).", show_default=False)]


def pause(ctx: typer.Context, board: PauseBoard = None) -> None:
    """Stop dispatchers from claiming cards; running cards go on."""
    open_kanban(ctx).set_paused(True, board=board)
    output.say(f"spawning paused {'on board ' + repr(board) if board else 'globally'}")


def resume(ctx: typer.Context, board: PauseBoard = None) -> None:
    """Let dispatchers claim cards again."""
    open_kanban(ctx).set_paused(False, board=board)
    output.say(f"spawning resumed {'on board ' + repr(board) if board else 'globally'}")
