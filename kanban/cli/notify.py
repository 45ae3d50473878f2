"""`kanban notify ...`: be told when a card, a tree, a board or a profile's cards are done,
fail, block, wait for an approval or a review (sent by a dispatcher, or `notify deliver`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import board_of, config_of, group, json_option, location_of, open_kanban
from kanban.state.errors import KanbanError, UsageError

if TYPE_CHECKING:
    from kanban.notify.service import Notifications

EVENTS_HELP = "done, failed, blocked, approval, review, cancelled"


@group("notify", no_args_is_help=True)
def notify_app() -> None:
    """Notifications: a card's events sent to a file, a webhook, a command or a card.

    Each event is written with the move that caused it and delivered at least once by a
    running dispatcher (or `kanban notify deliver`), retried with backoff.
    """


def notifications(ctx: click.Context) -> Notifications:
    from kanban.notify.service import Notifications

    kb = open_kanban(ctx)
    return Notifications(kb.db, board_of(ctx), config=config_of(ctx), env=os.environ,
                         home=location_of(ctx).home, clock=kb.clock)


def _scope(card: int | None, tree: int | None, profile: str | None) -> tuple[str, str]:
    given = [(n, v) for n, v in (("card", card), ("tree", tree), ("profile", profile))
             if v is not None]
    if len(given) > 1:
        raise UsageError("give one of --card, --tree or --profile (none: the whole board)")
    if not given:
        return "board", ""
    return given[0][0], str(given[0][1])


@notify_app.command("add")
@click.option("--on", "events", required=True, metavar="EVENTS",
              help=f"Comma-separated events: {EVENTS_HELP}.")
@click.option("--card", type=int, metavar="ID", help="Only this card.")
@click.option("--tree", type=int, metavar="ID", help="This card and every card below it.")
@click.option("--profile", metavar="NAME", help="The board's cards run by this profile.")
@click.option("--deliver", "target", required=True, metavar="TARGET",
              help="file:PATH, webhook:URL (HMAC-signed), cmd:COMMAND (reads the event on "
                   "stdin) or board:CARD (a comment).")
@json_option
@click.pass_context
def add(ctx: click.Context, events: str, card: int | None, tree: int | None,
        profile: str | None, target: str, as_json: bool) -> None:
    """Subscribe a target to events of a card, a tree, a profile or (by default) every card
    of the board (--board B picks the board)."""
    from kanban.notify.manage import SubscriptionSpec, parse_events

    scope, value = _scope(card, tree, profile)
    sub = notifications(ctx).add(SubscriptionSpec(parse_events(events), scope, value, target))
    if as_json:
        output.print_json(_sub_json(sub))
    else:
        output.out(f"notification {sub.id}: {','.join(sub.events)} of {sub.scope_text} "
                   f"→ {sub.target}")


@notify_app.command("list")
@json_option
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """List the board's subscriptions with what each has not delivered yet."""
    rows = notifications(ctx).listing()
    if as_json:
        output.print_json([{**_sub_json(s), "undelivered": b.to_json()} for s, b in rows])
        return
    if not rows:
        output.out("no notifications (add one with `kanban notify add`)")
    for sub, backlog in rows:
        waiting = f"  ({backlog.pending} queued, {backlog.failed} failed)" \
            if backlog.pending or backlog.failed else ""
        output.out(f"{sub.id}  {','.join(sub.events)} of {sub.scope_text} → "
                   f"{output_safe(sub.target)}{waiting}")
        if backlog.last_error:
            output.out(f"    last error: {output_safe(backlog.last_error)}")


@notify_app.command("rm")
@click.argument("sub_id", metavar="ID", type=int)
@click.pass_context
def remove(ctx: click.Context, sub_id: int) -> None:
    """Remove a subscription (what it already queued is still delivered)."""
    sub = notifications(ctx).remove(sub_id)
    output.out(f"notification {sub.id} removed")


@notify_app.command("test")
@click.argument("sub_id", metavar="ID", type=int)
@click.pass_context
def test(ctx: click.Context, sub_id: int) -> None:
    """Send a test message to a subscription's target now, and say whether it arrived."""
    error = notifications(ctx).test(sub_id)
    if error is not None:
        raise KanbanError(f"notification {sub_id}: {output_safe(error)}")
    output.out(f"notification {sub_id}: test delivered")


@notify_app.command("deliver")
@json_option
@click.pass_context
def deliver(ctx: click.Context, as_json: bool) -> None:
    """Deliver every notification and cron result that is due, and exit (for a system
    cron or timer where no dispatcher runs)."""
    from kanban.dispatcher.outbound import courier_for

    kb = open_kanban(ctx)
    courier = courier_for(kb.db, config_of(ctx), location_of(ctx).home, os.environ)
    attempts = courier.deliver_due(limit=1000)
    if as_json:
        output.print_json([a.to_json() for a in attempts])
        return
    for a in attempts:
        output.out(f"{a.source} {a.delivery_id} to {output_safe(a.target)}: {a.status}"
                   + (f" ({output_safe(a.error)})" if a.error else ""))
    if not attempts:
        output.out("nothing due")


@notify_app.command("redeliver")
@click.pass_context
def redeliver(ctx: click.Context) -> None:
    """Queue the board's failed notifications again, with fresh attempts."""
    count = notifications(ctx).redeliver()
    output.out(f"{count} failed notification{'' if count == 1 else 's'} queued again")


def output_safe(text: str) -> str:
    from kanban.textsafety import visible

    return visible(text, one_line=True)


def _sub_json(sub: object) -> dict[str, object]:
    from kanban.notify.outbox import Subscription

    assert isinstance(sub, Subscription)
    return {"id": sub.id, "board": sub.board, "scope": sub.scope, "scope_value": sub.scope_value,
            "events": list(sub.events), "target": sub.target, "created_by": sub.created_by,
            "created_at": sub.created_at.isoformat()}
