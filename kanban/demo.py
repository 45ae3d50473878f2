"""`make demo`: the whole product offline, on a fresh `.kanban-demo/` board.

A scripted lead splits a goal into cards (one depending on the others), a
dispatcher forks workers that do them while the live board redraws, and the
lead answers with their results.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import typer.main
from rich.console import Console
from rich.live import Live

from kanban.cli.app import app
from kanban.cli.views import render_board

DEMO_DIR = Path(".kanban-demo")
GOAL = "Write a one-page guide to SQLite's write-ahead log"
CONFIG = """# Demo: workers answer through the offline scripted model, slowed to be watchable.
[profiles.default]
model = "scripted:demo-slow"

[profiles.lead]
model = "scripted:lead-demo"
"""


def cli(*args: str, db: Path) -> None:
    """One `kanban` command in-process, as the console script would run it."""
    try:
        typer.main.get_command(app).main(args=["--db", str(db), *args], prog_name="kanban")
    except SystemExit as exc:
        if exc.code:
            raise


def main() -> None:
    from dispatcher.embedded import dispatcher_for
    from kanban.service import Kanban
    from state import DbLocation, open_database
    from state.config import load_config
    from worker.lead import lead_model, run_lead, start_lead

    console = Console(highlight=False)
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    db_path = DEMO_DIR / "kanban.db"
    console.print("[bold]$ kanban init[/bold]")
    cli("init", db=db_path)
    (DEMO_DIR / "config.toml").write_text(CONFIG)
    location = DbLocation(str(db_path.absolute()), "flag")
    db = open_database(location)
    kb = Kanban(db)
    config = load_config(location.home / "config.toml")
    spec = lead_model(config, {}, None)
    console.print(f'\n[bold]$ kanban run "{GOAL}"[/bold]  (lead model: {spec})')
    claim = start_lead(kb, goal=GOAL, context="", board="default", model=spec,
                       lease_s=config.limits.lease_s)
    outcome: dict[str, object] = {}
    with dispatcher_for(kb, location, "default"):
        lead = threading.Thread(target=lambda: outcome.update(
            result=run_lead(kb, claim, config=config, model_spec=spec, env={})))
        lead.start()
        with Live(render_board(kb.board_snapshot("default")), console=console,
                  refresh_per_second=4) as live:
            while lead.is_alive():
                lead.join(0.25)
                live.update(render_board(kb.board_snapshot("default")))
    result = outcome["result"]
    console.print("\n[bold]The lead's answer[/bold]")
    console.print(getattr(result, "answer", None) or getattr(result, "error", "no answer"))
    console.print("\n[bold]$ kanban board[/bold]")
    cli("board", db=db_path)
    console.print(f"\n[bold]$ kanban show {claim.card_id}[/bold]")
    cli("show", str(claim.card_id), db=db_path)
    db.dispose()
    console.print(f"\nThe demo board lives in {db_path}; try `kanban --db {db_path} log 2`.")


if __name__ == "__main__":
    main()
