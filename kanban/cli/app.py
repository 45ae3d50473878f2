"""The `kanban` command: the root app, the global --db option and `main()`."""

# No `from __future__ import annotations`: Typer reads these signatures at start-up and
# evaluating string annotations triples the cost of building the command tree.

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from kanban.cli import boards, cards, cron, lead, output, runtime
from kanban.cli.context import DEFAULT_BOARD, CliState, init_location
from kanban.cli.errors import KanbanGroup, exit_code_for
from kanban.service import Kanban
from state.db import open_database

app = typer.Typer(
    name="kanban",
    cls=KanbanGroup,
    help="A SQLite-backed kanban board whose cards are worked by agents.",
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    ctx: typer.Context,
    db: Annotated[Path | None, typer.Option(
        "--db", metavar="PATH", show_default=False,
        help="The database file (default: $KANBAN_DB, else the nearest .kanban/kanban.db "
             "above the current directory, else the user data directory).")] = None,
) -> None:
    """A SQLite-backed kanban board whose cards are worked by agents."""
    ctx.obj = CliState(db_arg=str(db) if db is not None else None)
    if ctx.invoked_subcommand is None:
        output.say(ctx.get_help())


@app.command()
def init(ctx: typer.Context) -> None:
    """Create .kanban/kanban.db here (or at --db / $KANBAN_DB) with a 'default' board."""
    location = init_location(ctx)
    existed = not location.is_postgres and location.path.exists()
    db = open_database(location, create=True)
    try:
        Kanban(db).ensure_board(DEFAULT_BOARD)
    finally:
        db.dispose()
    where = location.target
    output.say(f"kanban database {'already at' if existed else 'created at'} {where}")


app.command("add")(cards.add)
app.command("board")(boards.board)
app.command("list")(cards.list_cards)
app.command("show")(cards.show)
app.command("log")(cards.log)
app.command("comment")(cards.comment)
app.command("link")(cards.link)
app.command("unlink")(cards.unlink)
app.command("block")(cards.block)
app.command("unblock")(cards.unblock)
app.command("complete")(cards.complete)
app.command("cancel")(cards.cancel)
app.command("retry")(cards.retry)
app.command("archive")(cards.archive)
app.command("pause")(boards.pause)
app.command("resume")(boards.resume)
app.command("status")(boards.status)
app.command("dispatch")(runtime.dispatch)
app.command("workers")(runtime.workers)
app.command("run")(lead.run)
app.add_typer(boards.boards_app, name="boards")
app.add_typer(cron.cron_app, name="cron")


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: run the app; every error is one stderr line and an exit code."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="kanban")
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # raised outside a command, e.g. while building the app
        sys.exit(exit_code_for(exc))


if __name__ == "__main__":
    main()
