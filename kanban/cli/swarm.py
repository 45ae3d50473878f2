"""`kanban swarm`: workers in parallel on one goal, a verifier, and a synthesizer's answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from kanban.cli import exit_codes, output
from kanban.cli.base import (
    board_of,
    command,
    config_of,
    json_option,
    location_of,
    open_kanban,
    require_skills,
    require_worktree_repository,
)
from kanban.signals import guarded

if TYPE_CHECKING:
    from kanban.swarms import Swarm

workers_option = click.option(
    "--workers", "-n", type=click.IntRange(1, 32), default=None,
    help="How many workers (default: one per --part, else 3).")
parts_option = click.option(
    "--part", "parts", multiple=True, metavar="TEXT",
    help="One worker's part of the goal (repeatable); without parts a planner card splits "
         "the goal first.")
verifier_option = click.option("--verifier", default="default", show_default=True,
                               metavar="PROFILE", help="The verifier's profile.")
synthesizer_option = click.option(
    "--synthesizer", default="default", show_default=True, metavar="PROFILE",
    help="The synthesizer's profile (its result is the answer).")


@command(epilog=exit_codes.help_epilog())
@click.argument("goal")
@workers_option
@parts_option
@verifier_option
@synthesizer_option
@click.option("--profile", default="default", show_default=True, metavar="PROFILE",
              help="The workers' profile.")
@click.option("--planner", default="default", show_default=True, metavar="PROFILE",
              help="The planner's profile (without --part).")
@click.option("--skill", "skills", multiple=True, metavar="NAME",
              help="A skill every worker gets (repeatable).")
@click.option("--key", default=None,
              help="Idempotency key: the unfinished swarm with this key is returned instead.")
@click.option("--review", metavar="GATE", default=None,
              help="The verifier card's review gate: verify:COMMAND, reviewer:PROFILE or "
                   "human (default: the verifier profile's own).")
@click.option("--follow", is_flag=True,
              help="Follow it live until the answer (as `kanban run --swarm`).")
@json_option
@click.pass_context
def swarm(ctx: click.Context, goal: str, workers: int | None, parts: tuple[str, ...],
          verifier: str, synthesizer: str, profile: str, planner: str,
          skills: tuple[str, ...], key: str | None, review: str | None, follow: bool,
          as_json: bool) -> None:
    """Create a swarm: workers in parallel, a verifier, a synthesizer's answer.

    One transaction creates N worker cards (on the --part texts, or after a planner card
    that splits GOAL), a verifier card depending on every worker, and a synthesizer card
    depending on the verifier and the workers, whose result is the swarm's answer. A
    running `kanban dispatch` works it; --follow waits for the answer and prints it.
    """
    made = create(ctx, goal, workers=workers, parts=parts, verifier=verifier,
                  synthesizer=synthesizer, profile=profile, planner=planner, skills=skills,
                  key=key, review=review)
    if follow:
        with guarded():
            follow_live(ctx, made, as_json=as_json)
    elif as_json:
        output.print_json(made.to_json())
    else:
        lead = f"planner #{made.planner}, " if made.planner is not None else ""
        ids = ", ".join(f"#{w}" for w in made.workers)
        verb = "created" if made.created else "already exists"
        output.out(f"swarm #{made.synthesizer} {verb}: {lead}workers {ids}, verifier "
                   f"#{made.verifier}, synthesizer #{made.synthesizer} (its result is the "
                   "answer)")


def create(ctx: click.Context, goal: str, *, workers: int | None, parts: Sequence[str],
           verifier: str, synthesizer: str, profile: str = "default",
           planner: str = "default", skills: Sequence[str] = (),
           key: str | None = None, review: str | None = None) -> Swarm:
    """Check the profiles and skills, then make the swarm's cards in one transaction."""
    from kanban.swarms import NewSwarm

    config = config_of(ctx)
    names = dict.fromkeys([profile, verifier, synthesizer, *([] if parts else [planner])])
    for name in names:
        config.profile(name)  # an unknown profile fails now, not at dispatch
    require_worktree_repository(ctx, *(config.profile(name).workspace for name in names))
    require_skills(ctx, skills)
    review = review if review is not None else config.profile(verifier).review
    if review is not None and review.startswith("reviewer:"):
        config.profile(review.removeprefix("reviewer:"))  # a reviewer that exists
    return open_kanban(ctx).create_swarm(NewSwarm(
        goal=goal, workers=workers, parts=tuple(parts), board=board_of(ctx), profile=profile,
        planner=planner, verifier=verifier, synthesizer=synthesizer, skills=tuple(skills),
        key=key, review=review))


def follow_live(ctx: click.Context, made: Swarm, *, as_json: bool = False,
                quiet: bool = False) -> None:
    """Run a dispatcher for the board if none serves it, show the swarm's cards live on a
    terminal, then print the synthesizer's answer (stdout) and the cards (stderr)."""
    from kanban.cli.progress import Progress, children_lines
    from kanban.dispatcher.embedded import dispatcher_for
    from kanban.swarms import follow

    kb = open_kanban(ctx)
    board = board_of(ctx)
    chatty = not quiet
    if chatty:
        output.note(f"swarm #{made.synthesizer} on board {board!r}: "
                    f"{len(made.workers)} workers")
    with dispatcher_for(kb, location_of(ctx), board) as service, \
            Progress(chatty) as progress:
        if service.dispatcher is None and chatty:
            output.note("using the running dispatcher")
        result = follow(kb.db, made, clock=kb.clock, board=board,
                        on_progress=progress.update, keep_served=service.ensure)
    if as_json:
        output.print_json(_json(made, result))
    else:
        if chatty:
            output.note("swarm cards:")
            for line in children_lines(result.statuses, kb.clock()):
                output.note(f"  {line}")
        if result.answer:
            output.out(result.answer)
    if result.error:
        raise exit_codes.Outcome(f"swarm #{made.synthesizer} stopped: {result.error}",
                                 _exit_code(made, result))


def _exit_code(made: Swarm, result: Any) -> int:
    """From exit_codes.TABLE: another card failed (the synthesizer then never runs), else
    the synthesizer did, else neither (the swarm could not go on: no dispatcher, spawning
    paused)."""
    stuck = [s for s in result.statuses if s.status in ("failed", "cancelled", "blocked")]
    others = [(s.status, s.error) for s in stuck if s.id != made.synthesizer]
    if others:
        return exit_codes.for_cards(others)
    return exit_codes.LEAD_FAILED if stuck else exit_codes.ERROR


def _json(made: Swarm, result: Any) -> dict[str, Any]:
    return {**made.to_json(), "answer": result.answer, "error": result.error,
            "cards": [{"id": s.id, "title": s.title, "status": s.status, "result": s.result,
                       "error": s.error} for s in result.statuses]}
