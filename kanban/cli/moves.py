"""Commands that move a card between states by hand."""

from __future__ import annotations

from datetime import datetime

import click

from kanban.cli import output
from kanban.cli.base import board_of, command, location_of, open_kanban
from kanban.cli.params import CARD_ID, SINCE, card_id_argument
from kanban.records import CardRecord


def _moved(card: CardRecord) -> None:
    output.out(f"#{card.id} is {card.status}")


def _text(ctx: click.Context, positional: str | None, option: str | None, name: str) -> str:
    """The text given as the argument or as --NAME (not both, not neither)."""
    if positional is not None and option is not None:
        raise click.UsageError(f"give the {name} once: as an argument or as --{name}", ctx)
    text = positional if positional is not None else option
    if text is None:
        raise click.UsageError(f"missing the {name}: `{ctx.command_path} ID \"...\"`", ctx)
    return text


@command()
@card_id_argument()
@click.argument("reason_text", metavar="[REASON]", required=False)
@click.option("--reason", help="What a person must do or decide (or give it as REASON).")
@click.pass_context
def block(ctx: click.Context, card_id: int, reason_text: str | None, reason: str | None) -> None:
    """Block a card until a person unblocks it.

    REASON says what a person must do or decide: `kanban block 12 "needs the API key"`.
    """
    _moved(open_kanban(ctx).block(card_id, _text(ctx, reason_text, reason, "reason")))


@command()
@card_id_argument()
@click.option("--note", help="A note the next attempt will see.")
@click.pass_context
def unblock(ctx: click.Context, card_id: int, note: str | None) -> None:
    """Return a blocked card to the queue."""
    _moved(open_kanban(ctx).unblock(card_id, note))


@command()
@card_id_argument()
@click.argument("summary_text", metavar="[SUMMARY]", required=False)
@click.option("--summary", help="The result handed to dependents (or give it as SUMMARY).")
@click.pass_context
def complete(ctx: click.Context, card_id: int, summary_text: str | None,
             summary: str | None) -> None:
    """Mark a card done by hand; its dependents may become ready.

    SUMMARY is the result handed to dependents: `kanban complete 12 "shipped in v2"`.
    """
    _moved(open_kanban(ctx).complete(card_id, _text(ctx, summary_text, summary, "summary")))


@command()
@card_id_argument()
@click.option("--reason", help="Why it is cancelled.")
@click.pass_context
def cancel(ctx: click.Context, card_id: int, reason: str | None) -> None:
    """Cancel an unfinished card.

    A running card's worker is stopped first.
    """
    _moved(open_kanban(ctx).cancel(card_id, reason=reason))


@command()
@click.argument("card_id", type=CARD_ID, metavar="[ID]", required=False)
@click.option("--status", "status", type=click.Choice(["failed", "cancelled", "done"]),
              help="Instead of one card: every card of the board in this state.")
@click.option("--since", type=SINCE, metavar="WHEN",
              help="With --status: only cards that finished since WHEN (30m, 2h, 3d or an "
                   "ISO time).")
@click.pass_context
def retry(ctx: click.Context, card_id: int | None, status: str | None,
          since: datetime | None) -> None:
    """Queue a done, failed or cancelled card again with fresh attempts.

    `kanban retry --status failed [--board B] [--since 1h]` requeues in bulk.
    """
    if (card_id is None) == (status is None):
        raise click.UsageError("give a card ID or --status STATE, not both", ctx)
    if since is not None and status is None:
        raise click.UsageError("--since goes with --status", ctx)
    kanban = open_kanban(ctx)
    if card_id is not None:
        _moved(kanban.retry(card_id))
        return
    assert status is not None
    requeued, refused = kanban.retry_all(board_of(ctx), status, since=since)
    for reason in refused:
        output.note(reason)
    output.out(f"requeued {len(requeued)} {status} card(s)"
               + (f": {', '.join(f'#{i}' for i in requeued)}" if 0 < len(requeued) <= 20
                  else ""))


@command()
@card_id_argument()
@click.pass_context
def archive(ctx: click.Context, card_id: int) -> None:
    """Hide a finished card from the board and lists.

    A git worktree checked out for the card is removed; its branch kanban/ID stays.
    """
    from kanban.cli.worktrees import remove_after_archive, workspace_defaults

    kanban = open_kanban(ctx)
    card = kanban.archive(card_id)
    output.out(f"#{card.id} is archived ({card.status})")
    remove_after_archive(kanban, card_id, location_of(ctx).home, workspace_defaults(ctx))
