"""Card commands: each parses, makes one library call, and prints the result."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import (
    board_filter,
    board_of,
    command,
    config_of,
    json_option,
    open_kanban,
    require_skills,
    require_worktree_repository,
)
from kanban.cli.params import (
    CARD_ID,
    CARD_POLICY_HELP,
    EDIT_POLICY_HELP,
    card_id_argument,
    complete_profiles,
    dependency_policy_option,
)
from kanban.cli.triage import decomposer_option, dry_run_option
from kanban.validation import MAX_ATTEMPTS_RANGE, TIMEOUT_RANGE

if TYPE_CHECKING:
    from kanban.cards import Added
    from kanban.state.config import Config, Profile

profile_option = click.option("--profile", shell_complete=complete_profiles, metavar="NAME",
                              help="The agent profile from config.toml.")


@command()
@click.argument("title")
@click.option("--goal", default="", help="What done looks like, for the agent.")
@click.option("--context", default="", help="Background the agent needs.")
@click.option("--priority", type=int, default=0, show_default=True,
              help="Higher is claimed first.")
@click.option("--depends-on", "depends_on", type=CARD_ID, multiple=True, metavar="ID",
              help="A card that must be done first (repeatable).")
@dependency_policy_option(CARD_POLICY_HELP)
@click.option("--profile", default="default", show_default=True, metavar="NAME",
              shell_complete=complete_profiles, help="The agent profile from config.toml.")
@click.option("--max-attempts", type=int, default=None,
              help="Attempts before the card fails (default: the profile's max_attempts).")
@click.option("--timeout", type=float, default=None,
              help="Seconds a run may take (default: the profile's).")
@click.option("--key", default=None, metavar="KEY",
              help="Idempotency key: if an unfinished card of the board has it, that card is "
                   "returned and nothing is added.")
@click.option("--at", "at", default=None, metavar="TIME",
              help="Schedule it: not started before TIME (2025-06-01T09:00, with an offset "
                   "such as +02:00, or 17:30 for the next 17:30; local time).")
@click.option("--in", "within", default=None, metavar="DURATION",
              help="Schedule it DURATION from now (90s, 15m, 2h, 1d).")
@click.option("--skill", "skills", multiple=True, metavar="NAME",
              help="A skill the worker gets (repeatable; see `kanban skills`).")
@click.option("--workspace", metavar="SPEC",
              help="Where the worker works: scratch (a folder of its own), dir:PATH (an "
                   "existing folder), worktree (a git branch kanban/ID) or parent (default: "
                   "the profile's, else scratch).")
@click.option("--toolsets", metavar="NAMES",
              help="Comma-separated toolsets, e.g. kanban,file,terminal (default: the "
                   "profile's).")
@click.option("--verify", metavar="CMD",
              help="Review gate: run CMD in the workspace when the worker completes; exit 0 "
                   "makes the card done, else it goes back with the output as feedback.")
@click.option("--reviewer", metavar="PROFILE", shell_complete=complete_profiles,
              help="Review gate: a PROFILE agent reviews the result and approves or requests "
                   "changes.")
@click.option("--human", is_flag=True,
              help="Review gate: wait for `kanban approve ID` or `kanban reject ID`.")
@click.option("--max-reviews", type=click.IntRange(*MAX_ATTEMPTS_RANGE), default=3,
              show_default=True, help="Review rounds that may ask for changes before the card "
                                      "fails (a --human card is blocked instead).")
@click.option("--triage", is_flag=True,
              help="TITLE is a rough idea: a decomposer agent splits it into child cards, and "
                   "the card ends with their results.")
@decomposer_option
@dry_run_option
@json_option
@click.pass_context
def add(ctx: click.Context, title: str, goal: str, context: str, priority: int,
        depends_on: tuple[int, ...], profile: str, max_attempts: int | None,
        timeout: float | None,
        key: str | None, at: str | None, within: str | None, skills: tuple[str, ...],
        workspace: str | None, toolsets: str | None, verify: str | None, reviewer: str | None,
        human: bool, max_reviews: int, triage: bool, decomposer: str | None, dry_run: bool,
        as_json: bool, on_dependency_failure: str | None = None) -> None:
    """Add a card; it is ready at once unless a dependency is unfinished.

    TITLE is one line saying what the card is for. Prints the new card's id (with --key,
    the id of the unfinished card holding the key). With --at or --in the card waits in
    `scheduled` until then. A review gate (--verify, --reviewer or --human) checks the
    worker's result before the card counts as done. With --triage a decomposer agent
    splits the card into child cards (see `kanban triage`).
    """
    from kanban.cards import NewCard
    from kanban.review import gate_spec

    kanban = open_kanban(ctx)
    config = config_of(ctx)
    chosen, names = _checked_choices(ctx, config, profile, skills, toolsets)
    spec = _workspace_spec(config, chosen, workspace)
    require_worktree_repository(ctx, spec)
    gate = gate_spec(verify=verify, reviewer=reviewer, human=human)
    if reviewer is not None:
        config.profile(reviewer)  # an unknown reviewer profile fails now, not after the work
    new = NewCard(
        title=title, goal=goal, context=context, board=board_of(ctx), priority=priority,
        profile=profile, depends_on=depends_on, timeout_s=timeout,
        max_attempts=chosen.max_attempts if max_attempts is None else max_attempts,
        key=key, run_at=scheduled_time(ctx, at, within, kanban.clock()), skills=skills,
        workspace=spec, toolsets=",".join(names) if names is not None else None,
        review=gate or chosen.review, max_reviews=max_reviews,
        on_dependency_failure=on_dependency_failure)
    if (decomposer is not None or dry_run) and not triage:
        raise click.UsageError("--decomposer and --dry-run go with --triage", ctx)
    if not triage:
        _print_added(kanban.add(new), key, as_json)
        return
    from kanban.cli.triage import print_proposal
    from kanban.triage import catalogue, decomposer_profile

    name = decomposer_profile(config, decomposer)
    if dry_run:
        new.validated()
        print_proposal(config, name, title, goal, context, as_json)
        return
    _print_added(kanban.triage_new(new, decomposer=name, catalog=catalogue(config)), key,
                 as_json)


def _checked_choices(ctx: click.Context, config: Config, profile: str,
                     skills: tuple[str, ...], toolsets: str | None
                     ) -> tuple[Profile, tuple[str, ...] | None]:
    """The card's profile and its --toolsets, refused now if config.toml lacks any of them
    (or a skill), not when a dispatcher picks the card up."""
    from kanban.toolsets import check, parse_list

    chosen = config.profile(profile)
    require_skills(ctx, [*chosen.skills, *skills])
    check(chosen.toolsets, config, f"profile {profile!r}")
    names = parse_list(toolsets)
    if names is not None:
        check(names, config, "--toolsets")
    return chosen, names


def _workspace_spec(config: Config, chosen: Profile, workspace: str | None) -> str | None:
    """--workspace against the current directory, else the profile's against config.toml's
    folder (a relative dir in config.toml starts there)."""
    from pathlib import Path

    from kanban.workspaces import normalise_spec

    if workspace is not None:
        return normalise_spec(workspace, base=Path.cwd(), has_parent=False)
    home = config.path.parent if config.path else Path.cwd()
    return normalise_spec(chosen.workspace, base=home, has_parent=False)


def _print_added(added: Added, key: str | None, as_json: bool) -> None:
    card = added.card
    if as_json:
        output.print_json({**card.to_json(), "created": added.created})
        return
    output.out(f"#{card.id}")
    if not added.created:
        output.note(f"#{card.id} already holds key {key!r} ({card.status}); nothing added")
    elif card.status == "scheduled":
        output.note(f"#{card.id} is scheduled for {output.when(card.run_after)}")
    elif card.status == "blocked":  # a dependency is failed or cancelled
        output.note(f"#{card.id} is blocked: {card.error}")


def scheduled_time(ctx: click.Context, at: str | None, within: str | None,
                   now: datetime) -> datetime | None:
    """--at or --in as a time (never both)."""
    from kanban.when import due_at, due_in

    if at is not None and within is not None:
        raise click.UsageError("give --at or --in, not both", ctx)
    if at is not None:
        return due_at(at, now)
    return due_in(within, now) if within is not None else None


@command()
@card_id_argument()
@click.option("--title", help="A new title (one line).")
@click.option("--goal", help="A new goal.")
@click.option("--context", help="New background.")
@click.option("--priority", type=int, help="A new priority (higher is claimed first).")
@profile_option
@click.option("--max-attempts", type=click.IntRange(*MAX_ATTEMPTS_RANGE),
              help="Attempts before the card fails.")
@click.option("--timeout", type=click.FloatRange(*TIMEOUT_RANGE), help="Seconds a run may take.")
@dependency_policy_option(EDIT_POLICY_HELP, board=True)
@json_option
@click.pass_context
def edit(ctx: click.Context, card_id: int, title: str | None, goal: str | None,
         context: str | None, priority: int | None, profile: str | None,
         max_attempts: int | None, timeout: float | None, as_json: bool,
         on_dependency_failure: str | None = None) -> None:
    """Change an unfinished card's title, goal, context, priority or limits.

    Only the options given change; the card's history records what changed. A running
    card keeps its worker; the next attempt sees the new values.
    """
    from kanban.edits import CardEdit

    change = CardEdit(title=title, goal=goal, context=context, priority=priority,
                      profile=profile, max_attempts=max_attempts, timeout_s=timeout,
                      on_dependency_failure=on_dependency_failure)
    if not change.given():
        raise click.UsageError("nothing to change: give --title, --goal, --context, "
                               "--priority, --profile, --max-attempts, --timeout or "
                               "--on-dependency-failure", ctx)
    kanban = open_kanban(ctx)
    if profile is not None:
        config_of(ctx).profile(profile)
    card, changed = kanban.edit(card_id, change)
    if as_json:
        output.print_json({"card": card.to_json(), "changed": changed})
    elif changed:
        output.out(f"#{card.id} edited: {', '.join(changed)}")
    else:
        output.out(f"#{card.id} unchanged (the values given are its current ones)")


@command()
@card_id_argument()
@json_option
@click.pass_context
def show(ctx: click.Context, card_id: int, as_json: bool) -> None:
    """Show one card: goal, result, dependencies, children, comments, runs and history.

    With --board, refuses a card of another board.
    """
    kanban = open_kanban(ctx)
    detail = kanban.detail(card_id, board=board_filter(ctx))
    approvals = kanban.approvals(card_id)
    from kanban.cli.reads import tree_totals

    totals = tree_totals(kanban, card_id)
    if as_json:
        output.print_json({**detail.to_json(), "approvals": [a.to_json() for a in approvals],
                           "tree": totals.to_json()})
        return
    from kanban.cli.plain import card_view
    from kanban.cli.reads import child_tree

    tree = child_tree(kanban, card_id)
    output.out_lines(card_view(detail, tree, full=not output.is_terminal(),
                               approvals=approvals, totals=totals))


@command()
@card_id_argument()
@click.option("--reasoning", is_flag=True, help="Show the model's reasoning (thinking) in full.")
@json_option
@click.pass_context
def log(ctx: click.Context, card_id: int, reasoning: bool, as_json: bool) -> None:
    """Show the transcript of each run of a card: messages, tool calls, models, usage, cost."""
    from kanban.cli.reads import transcript

    t = transcript(open_kanban(ctx), card_id)
    if as_json:
        output.print_json(t.to_json())
        return
    from kanban.cli.plain import transcript_lines

    output.out_lines(transcript_lines(t, reasoning=reasoning))


@command()
@card_id_argument()
@click.argument("body")
@click.pass_context
def comment(ctx: click.Context, card_id: int, body: str) -> None:
    """Comment on a card; its next run sees it.

    BODY is the comment text.
    """
    comment_id = open_kanban(ctx).comment(card_id, body)
    output.out(f"comment {comment_id} added to #{card_id}")


@command()
@card_id_argument()
@card_id_argument("depends_on_id", "DEPENDS_ON_ID")
@click.pass_context
def link(ctx: click.Context, card_id: int, depends_on_id: int) -> None:
    """Make a card wait for another card of its board."""
    created = open_kanban(ctx).link(card_id, depends_on_id)
    verb = "now depends on" if created else "already depends on"
    output.out(f"#{card_id} {verb} #{depends_on_id}")


@command()
@card_id_argument()
@card_id_argument("depends_on_id", "DEPENDS_ON_ID")
@click.pass_context
def unlink(ctx: click.Context, card_id: int, depends_on_id: int) -> None:
    """Remove a dependency between two cards."""
    open_kanban(ctx).unlink(card_id, depends_on_id)
    output.out(f"#{card_id} no longer depends on #{depends_on_id}")
