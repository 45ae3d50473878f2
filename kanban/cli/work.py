"""Commands about a card's work: its workspace, and approving or denying its commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import command, config_of, json_option, location_of, open_kanban
from kanban.cli.params import card_id_argument

if TYPE_CHECKING:
    from kanban.workspaces import Workspace


@command()
@card_id_argument()
@click.option("--remove", is_flag=True,
              help="Remove the finished card's git worktree (its branch kanban/ID stays).")
@json_option
@click.pass_context
def workspace(ctx: click.Context, card_id: int, remove: bool, as_json: bool) -> None:
    """Print the directory a card's worker works in (its workspace), and nothing else.

    For a git worktree, stderr (and --json) also says whether its branch is merged into
    the repository's current branch.
    """
    home = location_of(ctx).home
    kanban = open_kanban(ctx)
    found = kanban.workspace(card_id, home, config_of(ctx).workspaces())
    if remove:
        _remove_worktree(ctx, card_id, found)
        return
    state = None
    if found.kind == "worktree" and found.branch is not None:
        from kanban.errors import KanbanError
        from kanban.tools.worktree_lifecycle import branch_state

        try:
            state = branch_state(home, found.branch)
        except KanbanError as exc:  # the path is still the answer asked for
            output.note(f"branch {found.branch}: {exc.message}")
    if as_json:
        output.print_json({**found.to_json(),
                           "branch_state": state.to_json() if state else None})
        return
    output.out(str(found.path))
    if state is not None:
        output.note(state.describe())


def _remove_worktree(ctx: click.Context, card_id: int, found: Workspace) -> None:
    from kanban.errors import InvalidTransition
    from kanban.states import TERMINAL
    from kanban.tools.worktree_lifecycle import own_checkout, remove_checkout

    if not own_checkout(found, card_id):
        raise InvalidTransition(f"#{card_id} has no git worktree of its own to remove "
                                f"(its workspace is {found.kind} at {found.path})")
    status = open_kanban(ctx).card(card_id).status
    if status not in TERMINAL:
        raise InvalidTransition(f"cannot remove #{card_id}'s worktree: it is {status} "
                                "(finish, cancel or wait for it first)")
    if remove_checkout(location_of(ctx).home, found.path):
        output.out(f"removed worktree {found.path} (branch {found.branch} kept)")
    else:
        output.out(f"no worktree at {found.path} (branch {found.branch} kept)")


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
