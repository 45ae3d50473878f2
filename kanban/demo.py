"""`make demo`: a by-hand walkthrough of the board through the `kanban` CLI.

It runs on a fresh `.kanban-demo/` database in the current directory. It will be
replaced by an agent-driven demo once the dispatcher lands.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import typer.main
from rich.console import Console

from kanban.cli.app import app

DEMO_DIR = Path(".kanban-demo")
STEPS: tuple[tuple[str, ...], ...] = (
    ("init",),
    ("add", "Write the CSV parser", "--priority", "5", "--goal", "Parse RFC 4180 files"),
    ("add", "Test the parser", "--depends-on", "1"),
    ("add", "Document the file format"),
    ("add", "Publish the release", "--depends-on", "2", "--depends-on", "3"),
    ("comment", "1", "Watch out for quoted newlines."),
    ("complete", "1", "--summary", "Parser handles quotes, newlines and BOMs."),
    ("block", "3", "--reason", "Which format version do we document?"),
    ("board",),
    ("show", "2"),
)


def run(*args: str, db: Path) -> int:
    """One `kanban` command in-process, as the console script would run it."""
    command = typer.main.get_command(app)
    try:
        command.main(args=["--db", str(db), *args], prog_name="kanban")
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def main() -> None:
    console = Console(highlight=False)
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    db = DEMO_DIR / "kanban.db"
    for step in STEPS:
        console.print(f"\n[bold]$ kanban {shlex.join(step)}[/bold]")
        code = run(*step, db=db)
        if code:
            raise SystemExit(code)
    console.print(f"\nThe demo board lives in {db}; try `kanban --db {db} board`.")


if __name__ == "__main__":
    main()
