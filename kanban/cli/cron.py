"""`kanban cron ...`: jobs that put a card on a board at set times (fired by the dispatcher)."""

# No `from __future__ import annotations`: Typer reads these signatures at start-up and
# evaluating string annotations triples the cost of building the command tree.

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated
from zoneinfo import ZoneInfo

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cron.schedule import describe
from kanban.cli import output
from kanban.cli.context import DEFAULT_BOARD, open_kanban
from kanban.cli.params import Board, Json
from kanban.cli.views import STATUS_STYLE
from kanban.cron_jobs import (
    CronJobDetail,
    CronJobRecord,
    CronJobs,
    NewCronJob,
    Overlap,
    UpcomingFire,
)

cron_app = typer.Typer(
    help="Cron jobs: put a card on a board on a schedule (a running dispatcher fires them).",
    no_args_is_help=True,
)

JobName = Annotated[str, typer.Argument(help="The cron job's name.", metavar="NAME",
                                        show_default=False)]


def _jobs(ctx: typer.Context) -> CronJobs:
    kanban = open_kanban(ctx)
    return CronJobs(kanban.db, clock=kanban.clock)


def when(at: datetime | None, timezone: str = "UTC") -> str:
    """A fire time in the job's timezone: `2025-03-30 03:30 CEST`."""
    if at is None:
        return "-"
    local = at.astimezone(UTC if timezone == "UTC" else ZoneInfo(timezone))
    shape = "%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M"
    return f"{local.strftime(shape)} {local.tzname() or timezone}"


@cron_app.command("add")
def add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A unique name: letters, digits, '.', '_' or '-'.",
                                        metavar="NAME", show_default=False)],
    schedule: Annotated[str, typer.Option(
        "--schedule", "-s", metavar="SPEC", show_default=False,
        help="A 5-field cron expression ('0 9 * * mon-fri') or @daily, 'every 2h', "
             "'in 30m', or an ISO time ('2025-07-01T09:00').")],
    goal: Annotated[str, typer.Option(help="The goal of each card the job creates.",
                                      show_default=False)],
    title: Annotated[str | None, typer.Option(
        help="The title of each card (default: the job's name).", show_default=False)] = None,
    board: Board = DEFAULT_BOARD,
    profile: Annotated[str, typer.Option(help="The agent profile of each card.")] = "default",
    tz: Annotated[str, typer.Option(
        "--tz", metavar="ZONE", help="The timezone of cron fields and ISO times "
                                     "(an IANA name such as Europe/Berlin).")] = "UTC",
    overlap: Annotated[Overlap, typer.Option(
        case_sensitive=False, help="While the previous card is unfinished: skip the fire "
                                   "(recorded as skipped) or allow another card.")] = Overlap.SKIP,
    as_json: Json = False,
) -> None:
    """Add a cron job; its first fire is the first slot after now."""
    job = _jobs(ctx).add(NewCronJob(name=name, schedule=schedule, goal=goal, title=title,
                                    board=board, profile=profile, timezone=tz,
                                    overlap=overlap))
    if as_json:
        output.print_json(job.to_json())
    else:
        output.say(f"cron job {job.name!r} added; next fire {when(job.next_fire_at, job.timezone)}")


@cron_app.command("list")
def list_jobs(
    ctx: typer.Context,
    board: Annotated[str | None, typer.Option(
        "--board", "-b", help="Only the jobs of this board (default: every board).",
        show_default=False)] = None,
    as_json: Json = False,
) -> None:
    """List cron jobs with their schedule and next fire."""
    cron = _jobs(ctx)
    jobs = cron.jobs(board=board)
    if as_json:
        output.print_json({"jobs": [j.to_json() for j in jobs]})
    else:
        output.console().print(jobs_table(jobs, cron.clock()))


@cron_app.command("show")
def show(ctx: typer.Context, name: JobName, as_json: Json = False) -> None:
    """Show a job: its schedule in words, its next 5 fires and the cards it created."""
    detail = _jobs(ctx).detail(name)
    if as_json:
        output.print_json(detail.to_json())
    else:
        output.console().print(job_view(detail))


@cron_app.command("rm")
def remove(ctx: typer.Context, name: JobName) -> None:
    """Remove a job; the cards it created stay on the board."""
    _jobs(ctx).remove(name)
    output.say(f"cron job {name!r} removed")


@cron_app.command("enable")
def enable(ctx: typer.Context, name: JobName) -> None:
    """Enable a job; its next fire is the first slot after now (missed ones are dropped)."""
    job = _jobs(ctx).enable(name)
    output.say(f"cron job {name!r} enabled; next fire {when(job.next_fire_at, job.timezone)}")


@cron_app.command("disable")
def disable(ctx: typer.Context, name: JobName) -> None:
    """Disable a job: it does not fire until enabled again."""
    _jobs(ctx).disable(name)
    output.say(f"cron job {name!r} disabled")


@cron_app.command("run")
def run(ctx: typer.Context, name: JobName, as_json: Json = False) -> None:
    """Fire an enabled job now, whatever its schedule and overlap; its next fire stays."""
    from cron.firing import fire_job_now

    kanban = open_kanban(ctx)
    result = fire_job_now(kanban.db, name, kanban.clock())
    if as_json:
        output.print_json(result.to_json())
    else:
        output.say(f"cron job {name!r} fired: #{result.card_id}")


# -- views ------------------------------------------------------------------------------------


def jobs_table(jobs: Sequence[CronJobRecord], now: datetime) -> RenderableType:
    if not jobs:
        return Text("no cron jobs (add one with `kanban cron add`)", "dim")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("name", overflow="fold")
    table.add_column("board", overflow="fold")
    table.add_column("schedule", overflow="fold", min_width=16, ratio=1)
    table.add_column("next fire", no_wrap=True)
    table.add_column("last card", no_wrap=True, justify="right")
    for job in jobs:
        next_fire = when(job.next_fire_at, job.timezone) if job.enabled else "disabled"
        table.add_row(job.name, job.board, describe(job.parsed(now)),
                      Text(next_fire, "" if job.enabled else "dim"),
                      f"#{job.last_card_id}" if job.last_card_id else "-")
    return table


def job_view(detail: CronJobDetail) -> RenderableType:
    job = detail.job
    state = Text("enabled", "green") if job.enabled else Text("disabled", "dim")
    parts: list[RenderableType] = [
        Text.assemble((f"cron job {job.name}", "bold"), "  ", state),
        Text(detail.description),
        Text(f"board {job.board} · profile {job.profile} · overlap {job.overlap}", "dim"),
        Text(f"last fire {when(job.last_fire_at, job.timezone)}", "dim"),
        Text.assemble(("card: ", "bold"), job.title),
    ]
    if job.goal:
        parts.append(Text.assemble(("goal: ", "bold"), job.goal))
    parts.append(Text("next fires:", "bold"))
    parts.extend(Text(f"  {when(at, job.timezone)}") for at in detail.next_fires)
    if not detail.next_fires:
        parts.append(Text("  none (disabled)", "dim"))
    parts.append(_cards_table(detail) if detail.cards else Text("no cards yet", "dim"))
    return Group(*parts)


def upcoming_view(fires: Sequence[UpcomingFire], now: datetime) -> RenderableType:
    """For `kanban status`: the next cron fires (from `kanban.cron_jobs.next_fires`)."""
    if not fires:
        return Text("cron: nothing scheduled", "dim")
    lines = [Text("next cron fires:", "bold")]
    for fire in fires:
        overdue = Text(" (overdue: no dispatcher fired it)", "yellow") if fire.at < now else ""
        lines.append(Text.assemble(f"  {when(fire.at, fire.timezone)}  {fire.job}",
                                   (f" on {fire.board}", "dim"), overdue))
    return Group(*lines)


def _cards_table(detail: CronJobDetail) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left",
                  title="cards created")
    for column in ("id", "created", "status", "outcome", "result"):
        table.add_column(column, no_wrap=column != "result", overflow="fold")
    for card in detail.cards:
        table.add_row(f"#{card.id}", when(card.created_at, detail.job.timezone),
                      Text(card.status, STATUS_STYLE.get(card.status, "")), card.outcome or "-",
                      Text((card.result or card.error or "").strip()[:200]))
    return table
