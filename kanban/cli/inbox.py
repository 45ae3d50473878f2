"""`kanban inbox`: what waits on a person, and the command that answers each."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import board_filter, command, json_option, open_kanban

if TYPE_CHECKING:
    from datetime import datetime

    from kanban.inbox import InboxItem


@command()
@click.option("--limit", "-n", type=click.IntRange(1, 10_000), default=100, show_default=True,
              help="List at most this many of the oldest cards.")
@json_option
@click.pass_context
def inbox(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List every card waiting on a person, oldest first, with the command that answers it.

    Pending command approvals (with the exact command and the rule it matched), cards in
    review that a person decides, triage nobody is splitting, and blocked cards with their
    reason. Every board unless --board is given.
    """
    kanban = open_kanban(ctx)
    found = kanban.inbox(board=board_filter(ctx), limit=limit)
    if as_json:
        output.print_json(found.to_json())
        return
    if not found.items:
        output.note("nothing waits on a person")
        return
    now = kanban.clock()
    for item in found.items:
        output.out_lines(item_lines(item, now))
    if found.more:
        output.note(f"the {limit:,} oldest shown; more wait (--limit N)")


def item_lines(item: InboxItem, now: datetime) -> list[str]:
    from kanban.when import age

    head = (f"#{item.card_id} {output.paint(item.kind, 'bold red')} · {item.board} · "
            f"{age(item.since, now)} ago  {item.title}")
    lines = [head]
    if item.commands:
        lines += [f"    command: {output.one_line(c.command)}  (rule: {c.pattern})"
                  for c in item.commands]
    else:
        lines.append(f"    {output.one_line(item.reason)}")
    lines += [f"    answer: {answer}" for answer in item.answers]
    return lines
