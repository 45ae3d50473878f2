"""`kanban gc`: archive old finished cards and prune what they left behind."""

from __future__ import annotations

from datetime import timedelta

import click

from kanban.cli import output
from kanban.cli.base import board_filter, command, json_option, location_of, open_kanban


@command()
@click.option("--older-than", "older_than", default="30d", show_default=True,
              help="Finished cards last changed longer ago than this (e.g. 30d, 12h).")
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 10_000),
              help="Cards per write transaction (other writers get the lock in between).")
@json_option
@click.pass_context
def gc(ctx: click.Context, older_than: str, batch: int, as_json: bool) -> None:
    """Archive finished cards past an age; prune their transcripts, events, logs, workspaces.

    Runs in short batches while dispatchers and workers go on. Cards you archived by hand
    keep their history; `kanban retry` still works on a pruned card. A card's git worktree
    is removed; its branch kanban/ID stays.
    """
    from kanban.cron.durations import parse_seconds

    age = timedelta(seconds=parse_seconds(older_than, "--older-than", example="30d"))
    from kanban.cli.worktrees import remover

    kb = open_kanban(ctx)
    home = location_of(ctx).home
    report = kb.collect_garbage(home, older_than=age, batch=batch, board=board_filter(ctx),
                                remove_worktree=remover(home))
    if as_json:
        output.print_json(report.to_json())
        return
    output.out(f"archived {report.archived} card(s) in {report.batches} batch(es); removed "
               f"{report.messages} transcript message(s), {report.events} event(s), "
               f"{report.logs} log(s), {report.workspaces} workspace(s), {report.worktrees} "
               "git worktree(s) (their branches kept)")
    if report.pages_freed:
        output.note(f"gave {report.pages_freed} page(s) back to the file system")
    elif report.pages_reusable:
        output.note(f"{report.pages_reusable} free page(s) will be reused by new writes (this "
                    "file predates incremental vacuum; `sqlite3 FILE 'VACUUM'` shrinks it)")
