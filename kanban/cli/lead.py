"""`kanban run GOAL`: a lead agent delegates the goal to the board and answers.

The agent runtime and the dispatcher are imported inside the command so other
commands start fast.
"""

# No `from __future__ import annotations`: Typer reads these signatures at start-up.

import os
from datetime import datetime
from typing import Annotated, Optional

import typer
from rich.live import Live
from rich.table import Table

from kanban.cli import output
from kanban.cli.context import location_of, open_kanban
from kanban.cli.params import Board
from kanban.errors import KanbanError


def run(
    ctx: typer.Context,
    goal: Annotated[str, typer.Argument(help="What you want done, in plain words.",
                                        show_default=False)],
    model: Annotated[Optional[str], typer.Option(  # noqa: UP045 - Typer needs Optional
        "--model", "-m", help="The lead's model: openai:MODEL, anthropic:MODEL or "
        "scripted:NAME (default: the lead/default profile; offline without an API key).")
    ] = None,
    board: Board = "default",
    context: Annotated[str, typer.Option(
        "--context", "-c", help="Background the lead should know.")] = "",
    max_children: Annotated[Optional[int], typer.Option(  # noqa: UP045 - Typer needs Optional
        "--max-children", min=1, max=100,
        help="Tasks per delegate call (default: config.toml, else 3).")] = None,
    max_concurrent: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--max-concurrent", min=1, max=100,
        help="Children unfinished at once (default: config.toml, else 3).")] = None,
    child_timeout: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--child-timeout", min=1, help="Seconds each child may run (default: config.toml, "
        "else 600).")] = None,
) -> None:
    """Give a goal to a lead agent: it delegates subtasks as cards, waits, and answers.

    Uses a running `kanban dispatch` for the board if there is one; otherwise runs a
    dispatcher for as long as the command runs. Ctrl-C cancels the lead's children.
    """
    from dispatcher.embedded import dispatcher_for
    from state.config import load_config
    from worker.lead import lead_model, run_lead, start_lead

    kb = open_kanban(ctx)
    location = location_of(ctx)
    config = with_limits(load_config(location.home / "config.toml"),
                         max_children_per_call=max_children,
                         max_concurrent_children=max_concurrent, child_timeout_s=child_timeout)
    spec = lead_model(config, os.environ, model)
    claim = start_lead(kb, goal=goal, context=context, board=board, model=spec,
                       lease_s=config.limits.lease_s)
    output.say(f"lead #{claim.card_id} on board {board!r} with {spec}")
    console = output.console()
    with dispatcher_for(kb, location, board) as embedded, Live(
            console=console, refresh_per_second=8, transient=not console.is_terminal) as live:
        if embedded is None:
            live.console.print("using the running dispatcher")
        result = run_lead(kb, claim, config=config, model_spec=spec,
                          on_progress=lambda statuses: live.update(
                              children_view(statuses, kb.clock())))
    if result.error:
        raise KanbanError(f"lead #{result.card_id} failed: {result.error}")
    console.print(children_view(_final(kb, result.children), kb.clock()))
    console.print(result.answer or "")


def with_limits(config, **overrides):  # type: ignore[no-untyped-def]
    """The config with the limits given as flags (None: keep config.toml's)."""
    from dataclasses import replace

    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(config, limits=replace(config.limits, **given)) if given else config


def _final(kb, ids):  # type: ignore[no-untyped-def]
    from kanban.children import children_status

    with kb.db.read() as conn:
        return children_status(conn, list(ids))


def children_view(statuses, now: datetime) -> Table:  # type: ignore[no-untyped-def]
    """One row per child: state, latest heartbeat note, elapsed time."""
    table = Table("card", "state", "progress", "elapsed", box=None, title="delegated cards",
                  title_justify="left")
    for s in statuses:
        end = s.finished_at or now
        elapsed = f"{(end - s.started_at).total_seconds():.1f}s" if s.started_at else "-"
        note = s.progress if s.status == "running" else (s.result or s.error or "")
        table.add_row(f"#{s.id} {s.title[:32]}", s.status, (note or "")[:40], elapsed)
    return table
