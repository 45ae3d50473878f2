"""Parameter types shared by several commands."""

# No `from __future__ import annotations`: Typer reads these signatures at start-up and
# evaluating string annotations triples the cost of building the command tree.

from typing import Annotated

import typer

from kanban.cli.context import BOARD_ENV
from kanban.validation import MAX_ID


def parse_card_id(value: str) -> int:
    """A card id as typed: `12` or `#12`."""
    if isinstance(value, int):
        return value
    text = value.strip().removeprefix("#")
    if not text.isdigit():
        raise typer.BadParameter(f"{value!r} is not a card id (a number such as 12 or #12)")
    if int(text) > MAX_ID:
        raise typer.BadParameter(f"{value!r} is too large to be a card id")
    return int(text)


CardId = Annotated[int, typer.Argument(
    help="The card's id (12 or #12).", parser=parse_card_id, metavar="ID", show_default=False)]
DependsOnId = Annotated[int, typer.Argument(
    help="The id of the card it depends on.", parser=parse_card_id, metavar="DEPENDS_ON_ID",
    show_default=False)]
Board = Annotated[str, typer.Option(
    "--board", "-b", envvar=BOARD_ENV, show_envvar=True,
    help="The board to work on.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
