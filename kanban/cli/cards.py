"""Card commands: each parses, makes one library call, and prints the result."""

# No `from __future__ import annotations`: Typer reads these signatures at start-up and
# evaluating string annotations triples the cost of building the command tree.

from typing import Annotated

import typer

from kanban.cards import NewCard
from kanban.cli import details, output, reads
from kanban.cli.context import DEFAULT_BOARD, config_of, open_kanban
from kanban.cli.params import Board, CardId, DependsOnId, Json, parse_card_id
from kanban.records import CardRecord
from kanban.states import CardStatus


def add(
    ctx: typer.Context,
    title: Annotated[str, typer.Argument(help="One line saying what the card is for.",
                                         show_default=False)],
    goal: Annotated[str, typer.Option(help="What done looks like, for the agent.")] = "",
    context: Annotated[str, typer.Option(help="Background the agent needs.")] = "",
    priority: Annotated[int, typer.Option(help="Higher is claimed first.")] = 0,
    depends_on: Annotated[list[int] | None, typer.Option(
        "--depends-on", parser=parse_card_id, metavar="ID", show_default=False,
        help="A card that must be done first (repeatable).")] = None,
    profile: Annotated[str, typer.Option(help="The agent profile from config.toml.")] = "default",
    board: Board = DEFAULT_BOARD,
    max_attempts: Annotated[int, typer.Option(help="Attempts before the card fails.")] = 3,
    timeout: Annotated[float | None, typer.Option(
        help="Seconds a run may take (default: the profile's).", show_default=False)] = None,
    as_json: Json = False,
) -> None:
    """Add a card; it is ready at once unless a dependency is unfinished."""
    kanban = open_kanban(ctx)
    config_of(ctx).profile(profile)  # an unknown profile fails now, not at dispatch
    card = kanban.add_card(NewCard(
        title=title, goal=goal, context=context, board=board, priority=priority,
        profile=profile, depends_on=tuple(depends_on or ()), max_attempts=max_attempts,
        timeout_s=timeout))
    if as_json:
        output.print_json(card.to_json())
    else:
        output.say(f"#{card.id}")


def list_cards(
    ctx: typer.Context,
    status: Annotated[list[CardStatus] | None, typer.Option(
        "--status", "-s", help="Only cards in this state (repeatable).", case_sensitive=False,
        show_default=False)] = None,
    board: Board = DEFAULT_BOARD,
    include_archived: Annotated[bool, typer.Option(
        "--all", help="Include archived cards.")] = False,
    limit: Annotated[int | None, typer.Option(
        min=1, help="Show at most this many cards.", show_default=False)] = None,
    as_json: Json = False,
) -> None:
    """List the cards of a board, oldest first."""
    cards = open_kanban(ctx).list_cards(board=board, statuses=[str(s) for s in status or ()],
                                        include_archived=include_archived, limit=limit)
    if as_json:
        output.print_json({"cards": [c.to_json() for c in cards]})
    else:
        output.console().print(details.card_table(cards))


def show(ctx: typer.Context, card_id: CardId, as_json: Json = False) -> None:
    """Show one card: goal, result, dependencies, children, comments, runs and history."""
    kanban = open_kanban(ctx)
    detail = kanban.detail(card_id)
    if as_json:
        output.print_json(detail.to_json())
    else:
        tree = reads.child_tree(kanban, detail.children)
        output.console().print(details.card_view(detail, tree))


def log(ctx: typer.Context, card_id: CardId, as_json: Json = False) -> None:
    """Show the transcript of each run of a card: messages, tool calls and usage."""
    transcript = reads.transcript(open_kanban(ctx), card_id)
    if as_json:
        output.print_json(transcript.to_json())
    else:
        output.console().print(details.transcript_view(transcript))


def comment(
    ctx: typer.Context,
    card_id: CardId,
    body: Annotated[str, typer.Argument(help="The comment text.", show_default=False)],
) -> None:
    """Comment on a card; its next run sees the comment."""
    comment_id = open_kanban(ctx).comment(card_id, body)
    output.say(f"comment {comment_id} added to #{card_id}")


def link(ctx: typer.Context, card_id: CardId, depends_on_id: DependsOnId) -> None:
    """Make a card wait for another card of the same board."""
    created = open_kanban(ctx).link(card_id, depends_on_id)
    verb = "now depends on" if created else "already depends on"
    output.say(f"#{card_id} {verb} #{depends_on_id}")


def unlink(ctx: typer.Context, card_id: CardId, depends_on_id: DependsOnId) -> None:
    """Remove a dependency between two cards."""
    open_kanban(ctx).unlink(card_id, depends_on_id)
    output.say(f"#{card_id} no longer depends on #{depends_on_id}")


def _moved(card: CardRecord) -> None:
    output.say(f"#{card.id} is {card.status}")


def block(
    ctx: typer.Context,
    card_id: CardId,
    reason: Annotated[str, typer.Option(help="What a person must do or decide.",
                                        show_default=False)],
) -> None:
    """Block a card until a person unblocks it."""
    _moved(open_kanban(ctx).block(card_id, reason))


def unblock(
    ctx: typer.Context,
    card_id: CardId,
    note: Annotated[str | None, typer.Option(help="A note the next attempt will see.",
                                             show_default=False)] = None,
) -> None:
    """Return a blocked card to the queue."""
    _moved(open_kanban(ctx).unblock(card_id, note))


def complete(
    ctx: typer.Context,
    card_id: CardId,
    summary: Annotated[str, typer.Option(help="The result handed to dependents.",
                                         show_default=False)],
) -> None:
    """Mark a card done by hand; its dependents may become ready."""
    _moved(open_kanban(ctx).complete(card_id, summary))


def cancel(
    ctx: typer.Context,
    card_id: CardId,
    reason: Annotated[str | None, typer.Option(help="Why it is cancelled.",
                                               show_default=False)] = None,
) -> None:
    """Cancel an unfinished card."""
    _moved(open_kanban(ctx).cancel(card_id, reason=reason))


def retry(ctx: typer.Context, card_id: CardId) -> None:
    """Queue a done, failed or cancelled card again with fresh attempts."""
    _moved(open_kanban(ctx).retry(card_id))


def archive(ctx: typer.Context, card_id: CardId) -> None:
    """Hide a finished card from the board and lists."""
    card = open_kanban(ctx).archive(card_id)
    output.say(f"#{card.id} is archived ({card.status})")
