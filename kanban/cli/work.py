"""Commands about a card's work: its workspace, and approving or denying its commands."""

from __future__ import annotations

import click

from kanban.cli import output
from kanban.cli.base import command, config_of, json_option, location_of, open_kanban
from kanban.cli.params import card_id_argument


@command()
@card_id_argument()
@json_option
@click.pass_context
def workspace(ctx: click.Context, card_id: int, as_json: bool) -> None:
    """Print the directory a card's worker works in (its workspace), and nothing else."""
    found = open_kanban(ctx).workspace(card_id, location_of(ctx).home,
                                       config_of(ctx).workspaces())
    if as_json:
        output.print_json(found.to_json())
    else:
        output.out(str(found.path))


@command()
@card_id_argument()
@click.option("--note", help="A note recorded with the approval.")
@click.pass_context
def approve(ctx: click.Context, card_id: int, note: str | None) -> None:
    """Pass a card's review gate, or approve the command a blocked card waits on.

    A card in review is done and its dependents may start. A blocked card is queued again;
    its next attempt runs exactly the command it asked for without asking.
    """
    kanban = open_kanban(ctx)
    gated = kanban.card(card_id).status == "review"
    card = kanban.approve(card_id, reason=note)
    if gated:
        output.out(f"#{card.id} passed its review; it is {card.status}")
        return
    decided = [a for a in kanban.approvals(card_id) if a.decision == "approved"]
    output.out(f"#{card.id} approved: {decided[-1].command}; it is {card.status}")


@command()
@card_id_argument()
@click.option("--reason", help="Why; the card's agent is told.")
@click.pass_context
def deny(ctx: click.Context, card_id: int, reason: str | None) -> None:
    """Deny the command a blocked card waits on; its next attempt is told so."""
    card = open_kanban(ctx).deny(card_id, reason=reason)
    output.out(f"#{card.id} denied; it is {card.status}")


@command()
@card_id_argument()
@click.option("--feedback", required=True, help="What to change; the next attempt is told.")
@click.pass_context
def reject(ctx: click.Context, card_id: int, feedback: str) -> None:
    """Send a card in review back for another attempt, with feedback.

    After the card's max_reviews rounds of changes a human-gated card is blocked (others fail).
    """
    card = open_kanban(ctx).reject(card_id, feedback)
    output.out(f"#{card.id} sent back; it is {card.status}")
