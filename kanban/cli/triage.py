"""`kanban triage`: a decomposer splits a card into child cards (or only shows how)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import command, config_of, json_option, open_kanban
from kanban.cli.params import card_id_argument, complete_profiles

if TYPE_CHECKING:
    from kanban.state.config import Config

decomposer_option = click.option(
    "--decomposer", metavar="PROFILE", shell_complete=complete_profiles,
    help='The decomposer profile (default: the profile with role = "decomposer").')
dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Run the decomposer here and print the graph it proposes; "
                                    "create nothing.")


@command()
@card_id_argument()
@decomposer_option
@dry_run_option
@json_option
@click.pass_context
def triage(ctx: click.Context, card_id: int, decomposer: str | None, dry_run: bool,
           as_json: bool) -> None:
    """Have a decomposer split a card into child cards (--dry-run: only show them).

    The card (ready or todo, not started) waits in triage; a decomposer card for the
    decomposer profile's agent proposes child cards with dependencies and profiles; the card
    then waits for them and ends with their results.
    """
    from kanban.triage import catalogue, decomposer_profile

    kanban = open_kanban(ctx)
    config = config_of(ctx)
    name = decomposer_profile(config, decomposer)
    if dry_run:
        card = kanban.card(card_id)
        print_proposal(config, name, card.title, card.goal, card.context, as_json)
        return
    card = kanban.triage(card_id, decomposer=name, catalog=catalogue(config))
    if as_json:
        output.print_json(card.to_json())
    else:
        output.out(f"#{card.id} is in triage; decomposer: {name}")


def print_proposal(config: Config, decomposer: str, title: str, goal: str, context: str,
                   as_json: bool) -> None:
    """Run the decomposer in this process and print its graph (nothing is stored)."""
    from kanban.worker.decompose import propose

    graph = propose(config, decomposer, title=title, goal=goal, context=context,
                    env=os.environ)
    if as_json:
        output.print_json({"dry_run": True, "decomposer": decomposer, **graph.to_json()})
    else:
        output.out_lines(graph.lines())
        output.note("dry run: nothing was created")
