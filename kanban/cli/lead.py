"""`kanban run GOAL`: a lead agent delegates the goal to the board and answers.

The agent runtime, the dispatcher and Rich are imported inside the command so other
commands start fast. The answer is data (stdout); progress and the final table of
delegated cards are status (stderr), printed once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from kanban.cli import output
from kanban.cli.base import (
    board_filter,
    board_of,
    command,
    config_of,
    location_of,
    open_kanban,
)
from kanban.cli.params import CARD_ID
from kanban.cli.swarm import create as create_swarm
from kanban.cli.swarm import (
    follow_live,
    parts_option,
    synthesizer_option,
    verifier_option,
    workers_option,
)
from kanban.errors import KanbanError

if TYPE_CHECKING:
    from kanban.children import ChildStatus
    from kanban.service import Kanban
    from kanban.state.config import Config
    from kanban.state.paths import DbLocation


@command()
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
    its synthesizer's result is the answer.
    """
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
    spec = _usable_model(config, model)
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


def _usable_model(config: Config, model: str | None) -> str:
    """The lead's model spec, refused now (before anything is stored) if it is unknown or
    its API key is missing."""
    from kanban.agent.model import resolve_model
    from kanban.worker.lead import lead_model

    spec = lead_model(config, os.environ, model)
    resolve_model(spec, env=os.environ)
    return spec


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
    serves the board), then print the answer."""
    from kanban.dispatcher.embedded import dispatcher_for
    from kanban.skills import load_catalog
    from kanban.worker.lead import run_lead, start_lead

    claim = start_lead(kb, goal=lead.goal, context=lead.context, board=lead.board,
                       model=lead.model, lease_s=config.limits.lease_s)
    if lead.subscribe is not None:  # the lead is ours (claimed): nothing of it has ended
        lead.subscribe(claim.card_id)
    chatty = not quiet  # notes go to stderr, so --json keeps them
    if chatty:
        output.note(f"lead #{claim.card_id} on board {lead.board!r} with {lead.model}")
    try:
        with (dispatcher_for(kb, location, lead.board) as embedded,
              _Progress(chatty) as progress):
            if embedded is None and chatty:
                output.note("using the running dispatcher")
            result = run_lead(kb, claim, config=config, model_spec=lead.model,
                              on_progress=progress.update, skills=load_catalog(location.home))
    except KeyboardInterrupt:
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

    def served() -> str | None:
        with kb.db.read() as conn:
            alive = control.serving_dispatchers(conn, card.board, kb.clock())
        return None if alive else f"no live dispatcher serves board {card.board!r}"

    if start:
        if card.status in ("failed", "cancelled"):
            raise KanbanError(f"#{card_id} is {card.status}; `kanban retry {card_id}` starts "
                              "it again")
        with dispatcher_for(kb, location_of(ctx), card.board) as embedded, \
                _Progress(chatty) as progress:
            if chatty:
                output.note(f"resuming #{card_id}" + (
                    " with the running dispatcher" if embedded is None else ""))
            result = follow(kb, card_id, on_progress=progress.update)
    else:
        with _Progress(chatty) as progress:
            result = follow(kb, card_id, on_progress=progress.update, still_served=served)
    _report(kb, result, card.model or "", card.board, as_json=as_json, chatty=chatty)


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
        raise KanbanError(f"lead #{result.card_id} failed: {result.error}")


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


def children_lines(statuses: Sequence[ChildStatus], now: datetime) -> list[str]:
    """One line per child: state, what it is doing or its result, elapsed time."""
    from kanban.activity import describe

    lines = []
    for s in statuses:
        end = s.finished_at or now
        elapsed = f"{(end - s.started_at).total_seconds():.1f}s" if s.started_at else "-"
        if s.status == "running":
            note = describe(s.activity, compact=True) or s.progress or ""
        else:
            note = s.result or s.error or ""
        lines.append(f"#{s.id} {s.status} {elapsed}  {s.title}"
                     + (f": {output.one_line(note)}" if note else ""))
    return lines


class _Progress:
    """A live table of the children on a terminal's stderr; nothing when piped."""

    def __init__(self, chatty: bool) -> None:
        self.live: Any = None
        self.enabled = chatty and output.is_terminal(sys.stderr)

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(stderr=True, highlight=False),
                             refresh_per_second=8, transient=True)
            self.live.__enter__()
        return self

    def update(self, statuses: list[ChildStatus]) -> None:
        if self.live is not None:
            from rich.text import Text

            from kanban.state.timeutil import utcnow

            self.live.update(Text("\n".join(children_lines(statuses, utcnow()))))

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)
