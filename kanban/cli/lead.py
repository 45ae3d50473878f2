"""`kanban run GOAL`: a lead agent delegates the goal to the board and answers.

The agent runtime, the dispatcher and Rich are imported inside the command so other
commands start fast. The answer is data (stdout); progress and the final table of
delegated cards are status (stderr), printed once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import click

from kanban.cli import exit_codes, output
from kanban.cli.base import (
    board_filter,
    board_of,
    command,
    config_of,
    location_of,
    open_kanban,
)
from kanban.cli.params import CARD_ID
from kanban.cli.progress import Progress, children_lines
from kanban.cli.swarm import create as create_swarm
from kanban.cli.swarm import (
    follow_live,
    parts_option,
    synthesizer_option,
    verifier_option,
    workers_option,
)
from kanban.errors import KanbanError
from kanban.signals import critical, guarded

if TYPE_CHECKING:
    from kanban.children import ChildStatus
    from kanban.service import Kanban
    from kanban.state.config import Config
    from kanban.state.paths import DbLocation


@command(epilog=exit_codes.help_epilog())
@click.argument("goal", required=False)
@click.option("--model", "-m", metavar="SPEC",
              help="The lead's model: openai:MODEL, anthropic:MODEL or scripted:NAME "
                   "(default: the lead/default profile; offline without an API key).")
@click.option("--context", "-c", default="", help="Background the lead should know.")
@click.option("--max-children", type=click.IntRange(1, 100),
              help="Tasks per delegate call (default: config.toml, else 3).")
@click.option("--max-concurrent", type=click.IntRange(1, 100),
              help="Children unfinished at once (default: config.toml, else 3).")
@click.option("--child-timeout", type=click.FloatRange(min=1),
              help="Seconds each child may run (default: config.toml, else 600).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the answer, card ids and token usage as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the answer.")
@click.option("--detach", is_flag=True,
              help="Add the lead as a card for the board's dispatchers, print its id and "
                   "return at once (follow it with --attach ID).")
@click.option("--attach", "attach_id", type=CARD_ID, metavar="ID",
              help="Follow lead card ID live until it answers (a dispatcher must serve the "
                   "board).")
@click.option("--resume", "resume_id", type=CARD_ID, metavar="ID",
              help="Continue lead card ID (after Ctrl-C, say) from its stored conversation: "
                   "runs a dispatcher if none serves the board, and follows it.")
@click.option("--swarm", "as_swarm", is_flag=True,
              help="Run the goal as a swarm instead (see `kanban swarm`): workers, a verifier "
                   "and a synthesizer, followed live until the answer.")
@click.option("--notify", "notify_target", metavar="TARGET",
              help="Send the events of the lead and every card below it (done, failed, "
                   "blocked, approval, review) to TARGET: file:PATH, webhook:URL, cmd:COMMAND "
                   "or board:CARD (see `kanban notify add`).")
@workers_option
@parts_option
@verifier_option
@synthesizer_option
@click.pass_context
def run(ctx: click.Context, goal: str | None, model: str | None, context: str,
        max_children: int | None, max_concurrent: int | None, child_timeout: float | None,
        as_json: bool, quiet: bool, detach: bool, attach_id: int | None,
        resume_id: int | None, as_swarm: bool, notify_target: str | None,
        workers: int | None, parts: tuple[str, ...], verifier: str, synthesizer: str) -> None:
    """Give a goal to a lead agent: it delegates subtasks as cards, waits, answers.

    GOAL is what you want done, in plain words; `-` reads it from stdin. Uses a running
    `kanban dispatch` for the board if there is one; otherwise runs a dispatcher for as
    long as the command runs. A model that cannot be used (unknown, no API key) is
    refused before anything is stored. Ctrl-C exits 130 and leaves the lead resumable:
    its children go back to the queue, and `kanban run --resume ID` (or any dispatcher)
    continues it from its stored conversation. With --swarm, the goal goes to a swarm and
    its synthesizer's result is the answer. The exit code says how it ended (below).
    """
    with guarded():
        _run(ctx, goal, model, context, max_children, max_concurrent, child_timeout, as_json,
             quiet, detach, attach_id, resume_id, as_swarm, notify_target, workers, parts,
             verifier, synthesizer)


def _run(ctx: click.Context, goal: str | None, model: str | None, context: str,
         max_children: int | None, max_concurrent: int | None, child_timeout: float | None,
         as_json: bool, quiet: bool, detach: bool, attach_id: int | None,
         resume_id: int | None, as_swarm: bool, notify_target: str | None,
         workers: int | None, parts: tuple[str, ...], verifier: str,
         synthesizer: str) -> None:
    _check_one_mode(goal, attach_id, resume_id)
    if attach_id is not None or resume_id is not None:
        if detach or as_swarm or notify_target:
            raise click.UsageError("--detach, --swarm and --notify need a GOAL")
        _follow(ctx, attach_id or resume_id or 0, start=resume_id is not None,
                as_json=as_json, quiet=quiet)
        return
    assert goal is not None
    goal = _read_goal(goal)
    if as_swarm:
        if notify_target:
            raise click.UsageError("--notify is for a lead; subscribe a swarm's cards with "
                                   "`kanban notify add --tree ID`")
        made = create_swarm(ctx, goal, workers=workers, parts=parts, verifier=verifier,
                            synthesizer=synthesizer)
        follow_live(ctx, made, as_json=as_json, quiet=quiet)
        return
    kb = open_kanban(ctx)
    board = board_of(ctx)
    location = location_of(ctx)
    config = with_limits(config_of(ctx), max_children_per_call=max_children,
                         max_concurrent_children=max_concurrent, child_timeout_s=child_timeout)
    from kanban.worker.lead import usable_lead_model

    spec = usable_lead_model(config, os.environ, model)
    lead = _Lead(goal, context, board, spec, _notifier(ctx, notify_target))
    if detach:
        _detach(kb, lead, quiet=quiet)
        return
    _lead_here(kb, location, config, lead, as_json=as_json, quiet=quiet)


def _notifier(ctx: click.Context, target: str | None) -> Callable[[int], None] | None:
    """--notify: the target checked now; subscribes the lead's tree once the card exists."""
    if target is None:
        return None
    from kanban.cli.notify import notifications
    from kanban.notify.manage import SubscriptionSpec

    notes = notifications(ctx)
    notes.check_target(target)

    def subscribe(card_id: int) -> None:
        notes.add(SubscriptionSpec(("done", "failed", "blocked", "approval", "review"), "tree",
                                   str(card_id), target), actor="kanban run")

    return subscribe


def _check_one_mode(goal: str | None, attach_id: int | None, resume_id: int | None) -> None:
    """Exactly one of GOAL, --attach and --resume."""
    chosen = [flag for flag, given in (("GOAL", goal is not None), ("--attach", attach_id),
                                       ("--resume", resume_id)) if given]
    if len(chosen) != 1:
        raise click.UsageError("give a GOAL, or --attach ID, or --resume ID" if not chosen
                               else f"{' and '.join(chosen)} cannot be used together")


@dataclass(frozen=True)
class _Lead:
    """What the lead card is given."""

    goal: str
    context: str
    board: str
    model: str
    subscribe: Callable[[int], None] | None = None  # --notify


def _detach(kb: Kanban, lead: _Lead, *, quiet: bool) -> None:
    """--detach: the lead as a card for the board's dispatchers; its id on stdout."""
    from kanban.worker.lead import add_lead

    card_id = add_lead(kb, goal=lead.goal, context=lead.context, board=lead.board,
                       model=lead.model)
    if lead.subscribe is not None:
        lead.subscribe(card_id)
    output.out(str(card_id))
    if not quiet:
        output.note(f"lead #{card_id} added to board {lead.board!r}; follow it with "
                    f"`kanban run --attach {card_id}`")


def _lead_here(kb: Kanban, location: DbLocation, config: Config, lead: _Lead, *,
               as_json: bool, quiet: bool) -> None:
    """Claim the lead card and run it in this process (a dispatcher alongside unless one
    serves the board), then print the answer. A signal at any moment leaves the lead
    resumable with no attempt spent, and the dispatcher run here stopped."""
    from kanban.dispatcher.embedded import dispatcher_for
    from kanban.skills import load_catalog
    from kanban.worker.lead import release_lead, run_lead, start_lead

    chatty = not quiet  # notes go to stderr, so --json keeps them
    claim = None
    try:
        with critical():  # the claim is remembered before an interrupt is raised
            claim = start_lead(kb, goal=lead.goal, context=lead.context, board=lead.board,
                               model=lead.model, lease_s=config.limits.lease_s)
        if lead.subscribe is not None:  # the lead is ours (claimed): nothing of it has ended
            lead.subscribe(claim.card_id)
        if chatty:
            output.note(f"lead #{claim.card_id} on board {lead.board!r} with {lead.model}")
        with (dispatcher_for(kb, location, lead.board) as service,
              Progress(chatty) as progress):
            if service.dispatcher is None and chatty:
                output.note("using the running dispatcher")
            result = run_lead(kb, claim, config=config, model_spec=lead.model,
                              on_progress=progress.update, skills=load_catalog(location.home),
                              keep_served=service.ensure)
    except KeyboardInterrupt:
        if claim is not None:
            with critical(), suppress(KanbanError):
                release_lead(kb, claim)
            output.note(f"interrupted: lead #{claim.card_id} can go on with "
                        f"`kanban run --resume {claim.card_id}`")
        raise
    _report(kb, result, lead.model, lead.board, as_json=as_json, chatty=chatty)


def _follow(ctx: click.Context, card_id: int, *, start: bool, as_json: bool,
            quiet: bool) -> None:
    """--attach (watch) and --resume (watch, with a dispatcher running meanwhile)."""
    from kanban import control
    from kanban.dispatcher.embedded import dispatcher_for
    from kanban.worker.lead import follow

    kb = open_kanban(ctx)
    card = kb.card(card_id, board=board_filter(ctx))
    chatty = not quiet
    waits = _WaitNotes(kb, card_id) if chatty else None

    def served() -> str | None:
        with kb.db.read() as conn:
            alive = control.serving_dispatchers(conn, card.board, kb.clock())
        return None if alive else f"no live dispatcher serves board {card.board!r}"

    if start:
        if card.status in ("failed", "cancelled"):
            raise KanbanError(f"#{card_id} is {card.status}; `kanban retry {card_id}` starts "
                              "it again")
        _take_over(kb, card_id, chatty=chatty)
        with dispatcher_for(kb, location_of(ctx), card.board) as service, \
                Progress(chatty) as progress:
            if chatty:
                output.note(f"resuming #{card_id}" + (
                    " with the running dispatcher" if service.dispatcher is None else ""))

            def keep_served() -> str | None:
                service.ensure()
                if waits is not None:
                    waits.say()
                return None

            result = follow(kb, card_id, on_progress=progress.update,
                            still_served=keep_served)
    else:
        def watched() -> str | None:
            reason = served()
            if reason is None and waits is not None:
                waits.say()
            return reason

        with Progress(chatty) as progress:
            result = follow(kb, card_id, on_progress=progress.update, still_served=watched)
    _report(kb, result, card.model or "", card.board, as_json=as_json, chatty=chatty)


def _take_over(kb: Kanban, card_id: int, *, chatty: bool) -> None:
    """A lead left `running` by a `kanban run` whose process is gone goes back to ready now
    (no attempt spent), so --resume need not wait for its lease to lapse."""
    from kanban.lead_liveness import requeue_orphaned_leads
    from kanban.transitions import Actor

    with kb.db.write() as conn:
        taken = requeue_orphaned_leads(conn, now=kb.clock(), actor=Actor("kanban run --resume"),
                                       card_id=card_id)
    if taken and chatty:
        output.note(f"#{card_id} was running under a `kanban run` that is gone: taken over "
                    "(no attempt spent)")


class _WaitNotes:
    """While --resume or --attach waits: what it waits for, on stderr, whenever that
    changes (the first at once)."""

    def __init__(self, kb: Kanban, card_id: int) -> None:
        self.kb, self.card_id, self.last = kb, card_id, ""

    def say(self) -> None:
        from kanban.lead_liveness import waiting_for

        with self.kb.db.read() as conn:
            what = waiting_for(conn, self.card_id)
        if what != self.last:
            self.last = what
            output.note(f"waiting: {what}")


def _report(kb: Kanban, result: Any, spec: str, board: str, *, as_json: bool,
            chatty: bool) -> None:
    """The answer (stdout), the delegated cards' final states (stderr), or the error."""
    children = _final(kb, result.children)
    if as_json:
        output.print_json(_json(kb, result, spec, board, children))
    else:
        if chatty and children:  # the final state of the delegated cards, printed once
            output.note("delegated cards:")
            for line in children_lines(children, kb.clock()):
                output.note(f"  {line}")
        if result.answer:
            output.out(result.answer)
    if result.error:
        code = (exit_codes.BUDGET if result.stop_reason in exit_codes.BUDGET_STOPS
                or exit_codes.BUDGET_WORDS.search(result.error) else exit_codes.LEAD_FAILED)
        raise exit_codes.Outcome(f"lead #{result.card_id} failed: {result.error}", code)
    code = exit_codes.for_cards((c.status, c.error) for c in children)
    if code != exit_codes.OK:
        failed = ", ".join(f"#{c.id} {c.status}" for c in children if c.status != "done")
        raise exit_codes.Outcome(f"lead #{result.card_id} answered, but not every card it "
                                 f"delegated is done: {failed}", code)


def _read_goal(goal: str) -> str:
    if goal != "-":
        return goal
    if output.is_terminal(sys.stdin):
        output.note("reading the goal from stdin (end with Ctrl-D)")
    text = sys.stdin.read().strip()
    if not text:
        raise click.UsageError("the goal read from stdin is empty")
    return text


def with_limits(config: Config, **overrides: Any) -> Config:
    """The config with the limits given as flags (None: keep config.toml's)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(config, limits=replace(config.limits, **given)) if given else config


def _final(kb: Kanban, ids: Sequence[int]) -> list[ChildStatus]:
    from kanban.children import children_status

    with kb.db.read() as conn:
        return children_status(conn, list(ids))


def _json(kb: Kanban, result: Any, spec: str, board: str,
          children: list[ChildStatus]) -> dict[str, Any]:
    cards = [kb.card(result.card_id), *(kb.card(c.id) for c in children)]
    usage = {key: sum(getattr(c, key) for c in cards)
             for key in ("input_tokens", "output_tokens", "cached_tokens")}
    by_id = {c.id: c for c in cards}
    return {
        "card_id": result.card_id, "board": board, "model": spec, "answer": result.answer,
        "error": result.error, "stop_reason": result.stop_reason,
        "children": [{"id": c.id, "title": c.title, "status": c.status, "result": c.result,
                      "error": c.error, "cost": by_id[c.id].cost,
                      "input_tokens": by_id[c.id].input_tokens,
                      "output_tokens": by_id[c.id].output_tokens} for c in children],
        "card_ids": [c.id for c in cards], "usage": usage,
        "cost": cards[0].cost, "total_cost": sum(c.cost for c in cards),
    }
