"""`make demo`: the whole product offline, on a fresh `.kanban-demo/` board.

A scripted lead splits a goal into cards (one depending on the others), a
dispatcher forks workers that do them while the live board redraws: each worker
writes its result as a file in the lead's folder (their shared workspace) and
counts its words with the terminal. The lead answers with their results, and
the demo shows where the files are.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from rich.console import Console
from rich.live import Live

from kanban.cli.app import app
from kanban.cli.output import is_terminal
from kanban.cli.views import console as stdout_console
from kanban.cli.views import render_board
from kanban.service import Kanban

DEMO_DIR = Path(".kanban-demo")
GOAL = "Write a one-page guide to SQLite's write-ahead log"
CONFIG = """# Demo: workers answer through the offline scripted model, slowed to be watchable.
# They write files: the file and terminal toolsets, in the lead's folder ("parent").
[profiles.default]
model = "scripted:demo-writer-slow"
toolsets = ["kanban", "file", "terminal"]
workspace = "parent"

[profiles.lead]
model = "scripted:lead-demo"
"""


def cli(*args: str, db: Path) -> None:
    """One `kanban` command in-process, as the console script would run it."""
    try:
        app.main(args=["--db", str(db), *args], prog_name="kanban")
    except SystemExit as exc:
        if exc.code:
            raise


def main() -> None:
    from kanban.dispatcher.embedded import dispatcher_for
    from kanban.state import DbLocation, open_database
    from kanban.state.config_file import load_config
    from kanban.worker.lead import lead_model, run_lead, start_lead

    console = stdout_console()  # unwrapped, uncoloured when piped, like every command
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
        watch_board(console, kb, lead)
    result = outcome["result"]
    console.print("\n[bold]The lead's answer[/bold]")
    console.print(getattr(result, "answer", None) or getattr(result, "error", "no answer"))
    console.print("\n[bold]$ kanban board[/bold]")
    cli("board", db=db_path)
    console.print(f"\n[bold]$ kanban show {claim.card_id}[/bold]")
    cli("show", str(claim.card_id), db=db_path)
    show_files(console, kb, db_path, claim.card_id)
    db.dispose()
    print(next_steps(db_path, claim.card_id))


def watch_board(console: Console, kb: Kanban, lead: threading.Thread) -> None:
    """Redraw the board while the lead works, on a terminal; piped, just wait (the plain
    `kanban board` printed afterwards shows where it ended)."""
    if not is_terminal():
        lead.join()
        return
    with Live(render_board(kb.board_snapshot("default")), console=console,
              refresh_per_second=4) as live:
        while lead.is_alive():
            lead.join(0.25)
            live.update(render_board(kb.board_snapshot("default")))


def next_steps(db_path: Path, lead_id: int) -> str:
    """The commands to try next; each works as printed from the repository folder."""
    kanban = f".venv/bin/kanban --db {db_path}"
    return f"""
Next: each of these works as printed (`source .venv/bin/activate` to type just `kanban`):
  {kanban} list
  {kanban} show {lead_id}
  {kanban} log {lead_id + 1}
  {kanban} workspace {lead_id + 1}
  {kanban} status
  {kanban} run -q "Plan a launch"
For a board of your own: `.venv/bin/kanban init` in a project folder, then
`.venv/bin/kanban add "..."` and `.venv/bin/kanban dispatch`."""


def show_files(console: Console, kb: Kanban, db_path: Path, lead_id: int) -> None:
    """Where the workers' files are, and the last one written."""
    children = kb.detail(lead_id).children
    if not children:
        return
    console.print(f"\n[bold]$ kanban workspace {children[0].id}[/bold]  (the children share "
                  "the lead's folder)")
    cli("workspace", str(children[0].id), db=db_path)
    folder = kb.workspace(children[0].id, db_path.parent).path
    files = sorted(p.name for p in folder.glob("*.md"))
    console.print(f"The workers wrote: {', '.join(files) or 'nothing'} in {folder}")
    draft = folder / "draft.md"
    if draft.exists():
        console.print(f"\n[bold]$ cat {draft}[/bold]")
        console.print(draft.read_text(), markup=False)


if __name__ == "__main__":
    main()
