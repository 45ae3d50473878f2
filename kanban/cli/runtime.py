"""Commands that run things: `dispatch` and `workers`.

The dispatcher is imported inside the command so other commands start fast.
"""

# No `from __future__ import annotations`: Typer reads these signatures at start-up.

from typing import Annotated, Optional

import typer

from kanban.cli import output
from kanban.cli.context import location_of, open_kanban
from kanban.cli.params import Json


def dispatch(
    ctx: typer.Context,
    max_workers: Annotated[int, typer.Option(
        "--max-workers", "-w", min=0, max=1024,
        help="Workers at once (0: config.toml, else from cores and memory).")] = 0,
    board: Annotated[Optional[str], typer.Option(  # noqa: UP045 - Typer needs Optional
        "--board", "-b", help="Only claim cards of this board (default: every board).")] = None,
    once: Annotated[bool, typer.Option(
        "--once", help="One pass: claim what is ready, wait for those workers, exit.")] = False,
    cold: Annotated[bool, typer.Option(
        "--cold", help="Start each worker as a fresh interpreter instead of forking a warm "
        "parent (slower; for comparison).")] = False,
    drain_timeout: Annotated[float, typer.Option(
        "--drain-timeout", min=0, help="On Ctrl-C, seconds to let running workers finish "
        "before handing their cards back.")] = 30.0,
) -> None:
    """Run a dispatcher in the foreground: claim ready cards and run their workers.

    Ctrl-C (or SIGTERM) stops claiming and lets running workers finish; a second one
    hands their cards back to the queue.
    """
    from dispatcher.loop import DispatchOptions
    from dispatcher.service import dispatch as run_dispatch

    kb = open_kanban(ctx)
    options = DispatchOptions(max_workers=max_workers, board=board, warm=not cold,
                              drain_timeout_s=drain_timeout)
    location = location_of(ctx)
    output.say(f"dispatching from {location.target} (Ctrl-C to stop)")
    d = run_dispatch(kb, location, options, once=once, say=output.say)
    output.say(f"dispatcher {d.id} stopped")


def workers(
    ctx: typer.Context,
    board: Annotated[Optional[str], typer.Option(  # noqa: UP045 - Typer needs Optional
        "--board", "-b", help="Only this board's workers.")] = None,
    as_json: Json = False,
) -> None:
    """List live workers: pid, card, attempt, heartbeat age and runtime."""
    from kanban.queries import live_workers

    kb = open_kanban(ctx)
    now = kb.clock()
    with kb.db.read() as conn:
        rows = live_workers(conn, board=board)
    if as_json:
        output.print_json({"workers": [w.to_json(now) for w in rows]})
        return
    if not rows:
        output.say("no live workers")
        return
    from rich.table import Table

    table = Table("pid", "card", "attempt", "heartbeat", "runtime", "progress", box=None)
    for w in rows:
        data = w.to_json(now)
        beat = f"{data['heartbeat_age_s']}s ago" if data["heartbeat_age_s"] is not None else "-"
        table.add_row(str(w.pid or "-"), f"#{w.card_id} {w.title[:30]}", str(w.attempt), beat,
                      f"{data['runtime_s']}s", (w.progress or "")[:30])
    output.console().print(table)
