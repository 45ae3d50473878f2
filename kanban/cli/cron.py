"""`kanban cron ...`: jobs that put a card on a board at set times (fired by the dispatcher,
or by `kanban cron tick`), and deliver each card's result where a person will see it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from kanban.cli import output
from kanban.cli.base import (
    board_filter,
    board_of,
    config_of,
    group,
    json_option,
    location_of,
    open_kanban,
    require_skills,
    require_worktree_repository,
)
from kanban.cli.params import complete_cron_jobs, complete_profiles
from kanban.cron.kinds import CatchUp, Overlap
from kanban.state.errors import UsageError

if TYPE_CHECKING:
    from kanban.cron.service import CronJobs

# Cron's own modules (and Rich) are imported inside the commands: every other command
# starts faster.


@group("cron", no_args_is_help=True)
def cron_app() -> None:
    """Cron jobs: put a card on a board on a schedule (a dispatcher fires them).

    Each card's result can be delivered to a file, a webhook, a command or another card.
    """


job_name_argument = click.argument("name", metavar="NAME", shell_complete=complete_cron_jobs)

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def job_settings(*, editing: bool) -> Decorator:
    """The options `add` and `edit` share (None: not given); `edit` also takes a new
    --schedule and --clear."""
    options = [*_card_options(), *_firing_options(), *_gate_options()]
    if editing:
        options += _editing_options()

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def _card_options() -> list[Decorator]:
    """What each card is: its work, its agent and its limits."""
    return [
        click.option("--goal", help="What each card's agent is to do."),
        click.option("--script", metavar="CMD",
                     help="A shell command each card runs instead of an agent (no model); "
                          "its stdout is the result and a non-zero exit fails the card."),
        click.option("--context-from", "context_from", multiple=True, metavar="JOB",
                     shell_complete=complete_cron_jobs,
                     help="Give each card the latest result of this job (repeatable): a "
                          "chained job."),
        click.option("--title", help="The title of each card (default: the job's name)."),
        click.option("--profile", metavar="NAME", shell_complete=complete_profiles,
                     help="The agent profile of each card (default: default); an unknown "
                          "profile is refused."),
        click.option("--model", metavar="SPEC",
                     help="The model of each card, e.g. openai:gpt-4o-mini (default: the "
                          "profile's)."),
        click.option("--toolsets", metavar="NAMES",
                     help="Comma-separated toolsets of each card (default: the profile's)."),
        click.option("--timeout", metavar="DURATION",
                     help="Wall-clock limit of each card, e.g. 90, 5m (default: 3m for "
                          "scripts, the profile's for agents)."),
        click.option("--max-attempts", "max_attempts", type=int,
                     help="Attempts before a card fails (default: 1 for scripts, 3 for "
                          "agents)."),
        click.option("--workspace", metavar="SPEC",
                     help="Where each card works: scratch (default), worktree or dir:/PATH."),
        click.option("--priority", type=int,
                     help="Priority of each card (higher is claimed first; default 0)."),
    ]


def _firing_options() -> list[Decorator]:
    """Where each result goes, and how fires fall in time."""
    return [
        click.option("--deliver", multiple=True, metavar="TARGET",
                     help="Send each result to file:PATH, webhook:URL, cmd:COMMAND or "
                          "board:CARD (repeatable)."),
        click.option("--tz", metavar="ZONE",
                     help="The timezone of cron fields and ISO times, e.g. Europe/Berlin "
                          "(default: UTC)."),
        click.option("--overlap", type=click.Choice([o.value for o in Overlap],
                                                    case_sensitive=False),
                     help="While the previous card is unfinished: skip the fire (default) or "
                          "allow another."),
        click.option("--catch-up", "catch_up",
                     type=click.Choice([c.value for c in CatchUp], case_sensitive=False),
                     help="Slots missed while no dispatcher ran: once (default: one card for "
                          "all), all (a card each) or skip (only a slot still due within a "
                          "minute)."),
        click.option("--jitter", metavar="DURATION",
                     help="Delay each fire by a random amount up to this, e.g. 30s (default: "
                          "none)."),
    ]


def _gate_options() -> list[Decorator]:
    """What checks each card's result, and the skills its worker gets."""
    return [
        click.option("--review", metavar="GATE",
                     help="Each card's review gate: verify:COMMAND, reviewer:PROFILE or human "
                          "(see `kanban add --verify`)."),
        click.option("--skill", "skill", multiple=True, metavar="NAME",
                     help="A skill each card's worker gets (repeatable; see `kanban "
                          "skills`)."),
    ]


def _editing_options() -> list[Decorator]:
    return [
        click.option("--schedule", "-s", metavar="SPEC",
                     help="A new schedule (the next fire is recomputed from now)."),
        click.option("--clear", multiple=True, metavar="SETTING",
                     help="Reset a setting to its default (repeatable): "
                          f"{', '.join(CLEARABLE)}."),
    ]


def _jobs(ctx: click.Context, *, checked: bool = False) -> CronJobs:
    from kanban.cron.checks import environment
    from kanban.cron.service import CronJobs

    kanban = open_kanban(ctx)
    env = environment(config_of(ctx)) if checked else None
    return CronJobs(kanban.db, clock=kanban.clock, env=env)


def _seconds(text: str | None, what: str, example: str) -> int | None:
    if text is None:
        return None
    from kanban.cron.durations import parse_seconds

    return parse_seconds(text, what, example=example, bare_seconds=True)


def _settings(**given: Any) -> dict[str, Any]:
    """The options a person gave, as job settings (None or nothing repeated: not given)."""
    renamed = {"script": "command", "timeout": "timeout_s", "jitter": "jitter_s",
               "tz": "timezone", "skill": "skills"}
    settings = {renamed.get(key, key): value for key, value in given.items()
                if value is not None and value != ()}
    for key in ("context_from", "deliver", "skills"):
        if key in settings:
            settings[key] = tuple(settings[key])
    if "overlap" in settings:
        settings["overlap"] = Overlap(settings["overlap"].lower())
    if "catch_up" in settings:
        settings["catch_up"] = CatchUp(settings["catch_up"].lower())
    if "toolsets" in settings:
        settings["toolsets"] = tuple(settings["toolsets"].split(","))
    if "timeout_s" in settings:
        settings["timeout_s"] = float(_seconds(settings["timeout_s"], "timeout", "5m") or 0)
    if "jitter_s" in settings:
        settings["jitter_s"] = _seconds(settings["jitter_s"], "jitter", "30s")
    return settings


def _check_profile(ctx: click.Context, settings: dict[str, Any], *, adding: bool) -> None:
    if "profile" in settings:
        config_of(ctx).profile(settings["profile"])  # refused now, not at the first fire
    if adding or "profile" in settings or "workspace" in settings:
        workspace = settings.get("workspace") or config_of(ctx).profile(
            settings.get("profile") or "default").workspace
        require_worktree_repository(ctx, workspace)  # a worktree outside git: now, too
    require_skills(ctx, settings.get("skills", ()))  # so are unknown skills
    gate = settings.get("review") or ""
    if gate.startswith("reviewer:"):
        config_of(ctx).profile(gate.removeprefix("reviewer:"))  # and an unknown reviewer


@cron_app.command("add")
@click.argument("name", metavar="NAME")
@click.option("--schedule", "-s", metavar="SPEC", required=True,
              help="A 5-field cron expression ('0 9 * * mon-fri') or @daily, 'every 2h', "
                   "'in 30m', or an ISO time ('2025-07-01T09:00').")
@job_settings(editing=False)
@json_option
@click.pass_context
def add(ctx: click.Context, name: str, schedule: str, as_json: bool, **given: Any) -> None:
    """Add a cron job (an agent's --goal or a --script) on --board.

    NAME is unique: letters, digits, '.', '_' or '-'. Its first fire is the first slot
    after now.
    """
    if given["goal"] is None and given["script"] is None:
        raise UsageError("give --goal (what each card's agent does) or --script (a command "
                         "each card runs)")
    settings = _settings(**given)
    _check_profile(ctx, settings, adding=True)
    from kanban.cron.jobs import JobSpec

    job = _jobs(ctx, checked=True).add(JobSpec(name=name, schedule=schedule,
                                               board=board_of(ctx), **settings))
    if as_json:
        output.print_json(job.to_json())
    else:
        from kanban.cli.cron_views import when

        output.out(f"cron job {job.name!r} added ({job.kind}); next fire "
                   f"{when(job.next_fire_at, job.timezone)}")


# --clear SETTING: the job setting it resets, and to what
CLEARABLE = {"model": ("model", None), "toolsets": ("toolsets", None),
             "timeout": ("timeout_s", None), "max-attempts": ("max_attempts", None),
             "workspace": ("workspace", None), "script": ("command", None),
             "context-from": ("context_from", ()), "deliver": ("deliver", ()),
             "jitter": ("jitter_s", 0), "skills": ("skills", ()), "review": ("review", None)}


@cron_app.command("edit")
@job_name_argument
@job_settings(editing=True)
@json_option
@click.pass_context
def edit(ctx: click.Context, name: str, clear: tuple[str, ...], as_json: bool,
         **given: Any) -> None:
    """Change a job's settings; lists given (--deliver, --context-from) replace the old ones.

    --board moves the job to that board. A change of schedule, timezone or jitter
    recomputes the next fire; an event records it.
    """
    changes = _settings(board=board_filter(ctx), **given)
    _check_profile(ctx, changes, adding=False)
    for setting in clear:
        if setting not in CLEARABLE:
            raise UsageError(f"--clear takes one of {', '.join(CLEARABLE)}, not {setting!r}")
        key, default = CLEARABLE[setting]
        changes[key] = default
    if not changes:
        raise UsageError("nothing to change (see `kanban cron edit --help`)")
    job = _jobs(ctx, checked=True).edit(name, changes)
    if as_json:
        output.print_json(job.to_json())
    else:
        from kanban.cli.cron_views import when

        next_fire = when(job.next_fire_at, job.timezone) if job.enabled else "none (disabled)"
        output.out(f"cron job {name!r} changed; next fire {next_fire}")


def _console() -> Any:
    from kanban.cli.views import console

    return console()


@cron_app.command("list")
@json_option
@click.pass_context
def list_jobs(ctx: click.Context, as_json: bool) -> None:
    """List cron jobs with their kind, schedule and next fire.

    With --board, only that board's jobs.
    """
    cron = _jobs(ctx)
    jobs = cron.jobs(board=board_filter(ctx))
    if as_json:
        output.print_json({"jobs": [j.to_json() for j in jobs]})
    else:
        from kanban.cli.cron_views import jobs_table

        _console().print(jobs_table(jobs, cron.clock()))


@cron_app.command("show")
@job_name_argument
@json_option
@click.pass_context
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show a job: its settings, next 5 fires, recent fires and undelivered results."""
    detail = _jobs(ctx).detail(name)
    if as_json:
        output.print_json(detail.to_json())
    else:
        from kanban.cli.cron_views import job_view

        _console().print(job_view(detail))


@cron_app.command("history")
@job_name_argument
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="How many fires.")
@json_option
@click.pass_context
def history(ctx: click.Context, name: str, limit: int, as_json: bool) -> None:
    """A job's fires, newest first: outcome, card, how long it took, tokens, deliveries."""
    job, fires = _jobs(ctx).history(name, limit=limit)
    if as_json:
        output.print_json({"job": job.name, "fires": [f.to_json() for f in fires]})
    elif not fires:
        output.note(f"cron job {name!r} has not fired yet")
    else:
        from kanban.cli.cron_views import fires_table

        _console().print(fires_table(fires, job.timezone, f"fires of {name}"))


@cron_app.command("rm")
@job_name_argument
@click.pass_context
def remove(ctx: click.Context, name: str) -> None:
    """Remove a job; its cards, history and pending deliveries stay."""
    _jobs(ctx).remove(name)
    output.out(f"cron job {name!r} removed")


@cron_app.command("enable")
@job_name_argument
@click.pass_context
def enable(ctx: click.Context, name: str) -> None:
    """Enable a job; its next fire is the first slot after now (missed ones are dropped)."""
    from kanban.cli.cron_views import when

    job = _jobs(ctx).enable(name)
    output.out(f"cron job {name!r} enabled; next fire {when(job.next_fire_at, job.timezone)}")


@cron_app.command("disable")
@job_name_argument
@click.pass_context
def disable(ctx: click.Context, name: str) -> None:
    """Disable a job: it does not fire until enabled again."""
    _jobs(ctx).disable(name)
    output.out(f"cron job {name!r} disabled")


@cron_app.command("run")
@job_name_argument
@json_option
@click.pass_context
def run(ctx: click.Context, name: str, as_json: bool) -> None:
    """Fire an enabled job now, whatever its overlap.

    A slot due now is taken by this run (never fired twice); otherwise the schedule stays.
    """
    result = _jobs(ctx, checked=True).run(name)  # checked: with config.toml's profiles
    if as_json:
        output.print_json(result.to_json())
    else:
        output.out(f"cron job {name!r} fired: #{result.card_id}")


@cron_app.command("tick")
@json_option
@click.pass_context
def tick(ctx: click.Context, as_json: bool) -> None:
    """Fire the jobs that are due, deliver finished results, and exit.

    For a system cron or systemd timer instead of a running dispatcher (`kanban dispatch
    --once` runs the cards). With --board, only that board's jobs.
    """
    from kanban.dispatcher.outbound import courier_for

    cron = _jobs(ctx, checked=True)  # config.toml's profiles for its cards
    fired = cron.fire_due(board=board_filter(ctx))
    courier = courier_for(cron.db, config_of(ctx), location_of(ctx).home, os.environ)
    attempts = courier.deliver_due(limit=1000)
    if as_json:
        output.print_json({"fired": [r.to_json() for r in fired],
                           "deliveries": [a.to_json() for a in attempts]})
    else:
        from kanban.cli.cron_views import tick_view

        _console().print(tick_view(fired, attempts))


@cron_app.command("redeliver")
@job_name_argument
@click.pass_context
def redeliver(ctx: click.Context, name: str) -> None:
    """Queue a job's failed deliveries again (a dispatcher or `cron tick` sends them)."""
    ids = _jobs(ctx).redeliver(name)
    output.out(f"{len(ids)} failed deliver{'y' if len(ids) == 1 else 'ies'} of {name!r} "
               "queued again" if ids else f"cron job {name!r} has no failed deliveries")
