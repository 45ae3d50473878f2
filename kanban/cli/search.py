"""`kanban search`: full-text search over cards, comments and transcripts."""

from __future__ import annotations

import click

from kanban.cli import output
from kanban.cli.base import board_filter, command, json_option, open_kanban
from kanban.search import MAX_LIMIT
from kanban.states import STATUS_NAMES as STATES


@command()
@click.argument("text")
@click.option("--status", "-s", "statuses", multiple=True, metavar="STATE",
              type=click.Choice(STATES, case_sensitive=False),
              help="Only cards in this state (repeatable).")
@click.option("--archived", is_flag=True, help="Include archived cards.")
@click.option("--limit", "-n", type=click.IntRange(1, MAX_LIMIT), default=20,
              show_default=True, help="At most this many cards.")
@json_option
@click.pass_context
def search(ctx: click.Context, text: str, statuses: tuple[str, ...], archived: bool,
           limit: int, as_json: bool) -> None:
    """Search titles, goals, context, results, comments and transcripts; best first.

    TEXT: words that must all appear, "a phrase" in quotes, pars* for a prefix. Every
    board unless --board is given.
    """
    hits = open_kanban(ctx).search(text, board=board_filter(ctx),
                                   statuses=[s.lower() for s in statuses],
                                   include_archived=archived, limit=limit)
    if as_json:
        output.print_json({"query": text, "hits": [h.to_json() for h in hits]})
        return
    from kanban.cli.report_views import search_lines

    output.out_lines(search_lines(hits, show_board=board_filter(ctx) is None))
