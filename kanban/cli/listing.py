"""`kanban list`: the newest cards of a board, or every card streamed as plain lines."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import board_of, command, json_option, open_kanban
from kanban.cli.params import SINCE
from kanban.states import STATUS_NAMES as STATES

if TYPE_CHECKING:
    from kanban.records import CardRecord

DEFAULT_LIMIT = 50


@command("list")
@click.option("--status", "-s", "statuses", multiple=True, metavar="STATE",
              type=click.Choice(STATES, case_sensitive=False),
              help=f"Only cards in this state (repeatable): {', '.join(STATES)}.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=DEFAULT_LIMIT,
              show_default=True, help="Show at most this many of the newest cards.")
@click.option("--all", "-a", "every", is_flag=True,
              help="Every matching card, streamed as plain lines (no limit).")
@click.option("--since", type=SINCE, metavar="WHEN",
              help="Only cards created since WHEN: a duration back from now (30m, 2h, 3d) "
                   "or an ISO time.")
@click.option("--archived", is_flag=True, help="Include archived cards.")
@json_option
@click.pass_context
def list_cards(ctx: click.Context, statuses: tuple[str, ...], limit: int, every: bool,
               since: datetime | None, archived: bool, as_json: bool) -> None:
    """List a board's cards, newest first (50 unless --limit or --all).

    A footer on stderr says how many more there are. Titles are never cut: pipe the
    output to grep, sort or cut as you like.
    """
    from kanban.card_filter import CardFilter

    flt = CardFilter(board=board_of(ctx), statuses=tuple(s.lower() for s in statuses),
                     include_archived=archived, since=since)
    kanban = open_kanban(ctx)
    if every:
        with kanban.stream_cards(flt) as cards:
            (_stream_json if as_json else _stream_lines)(cards)
        return
    page = kanban.card_page(flt, limit)
    if as_json:
        output.print_json({"cards": [c.to_json() for c in page.cards], "total": page.total,
                           "more": page.more})
        return
    from kanban.cli.plain import card_lines_for

    if not page.cards:
        output.note("no cards" + (" match" if statuses or since else f" on board {flt.board!r}"))
        return
    lines = card_lines_for(page.cards, kanban.clock())
    if output.is_terminal():
        output.out(lines.header())
    output.out_lines(lines.lines(page.cards))
    if page.more:
        output.note(f"{len(page.cards):,} newest of {page.total:,} cards; {page.more:,} more "
                    "(--limit N, --all or --since WHEN)")


def _stream_lines(cards: Iterator[CardRecord]) -> None:
    from kanban.cli.plain import CardLines
    from kanban.state.timeutil import utcnow

    first = next(cards, None)  # newest first: the first id is the widest
    if first is None:
        output.note("no cards")
        return
    lines = CardLines(utcnow(), len(str(first.id)))
    if output.is_terminal():
        output.out(lines.header())
    output.out_lines(lines.lines(itertools.chain([first], cards)))


def _stream_json(cards: Iterator[CardRecord]) -> None:
    write = sys.stdout.write
    write('{"cards": [')
    total = 0
    for total, card in enumerate(cards, start=1):
        write(("\n  " if total == 1 else ",\n  ")
              + output.json_text(card.to_json()))
    write(f'\n], "total": {total}, "more": 0}}\n')
