"""How `kanban cron ...` and `kanban status` show jobs, fires and deliveries (Rich)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kanban.cli.views import STATUS_STYLE
from kanban.cron.schedule import describe, describe_seconds

if TYPE_CHECKING:  # the courier imports the command runner: `cron list` needs none of it
    from kanban.cron.firing import FireResult
    from kanban.cron.jobs import CronJobRecord
    from kanban.cron.ledger import DeliveryRecord, FireRecord
    from kanban.cron.manage import CronJobDetail, UpcomingFire
    from kanban.delivery.courier import Attempt

_DELIVERY_STYLE = {"delivered": "green", "failed": "red", "pending": "yellow",
                   "sending": "yellow", "waiting": "dim"}


def when(at: datetime | None, timezone: str = "UTC") -> str:
    """A time in the job's timezone: `2025-03-30 03:30 CEST`."""
    if at is None:
        return "-"
    local = at.astimezone(UTC if timezone == "UTC" else ZoneInfo(timezone))
    shape = "%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M"
    return f"{local.strftime(shape)} {local.tzname() or timezone}"


def jobs_table(jobs: Sequence[CronJobRecord], now: datetime) -> RenderableType:
    if not jobs:
        return Text("no cron jobs (add one with `kanban cron add`)", "dim")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("name", overflow="fold")
    table.add_column("kind")
    table.add_column("board", overflow="fold")
    table.add_column("schedule", overflow="fold", min_width=16, ratio=1)
    table.add_column("next fire", no_wrap=True)
    table.add_column("last card", no_wrap=True, justify="right")
    for job in jobs:
        next_fire = when(job.next_fire_at, job.timezone) if job.enabled else "disabled"
        table.add_row(job.name, job.kind, job.board, describe(job.parsed(now)),
                      Text(next_fire, "" if job.enabled else "dim"),
                      f"#{job.last_card_id}" if job.last_card_id else "-")
    return table


def settings_lines(job: CronJobRecord) -> list[Text]:
    """The per-job settings, each with where its default comes from."""
    timeout = (f"{job.card_timeout_s:g}s" if job.card_timeout_s is not None
               else "the profile's")
    toolsets = ",".join(job.toolsets) if job.toolsets is not None else "the profile's"
    model = job.model or "the profile's"
    lines = [
        Text(f"board {job.board} · profile {job.profile} · model {model} · toolsets {toolsets}",
             "dim"),
        Text(f"timeout {timeout} · attempts {job.card_max_attempts} · priority "
             f"{job.priority} · workspace {job.workspace or 'scratch'}", "dim"),
        Text(f"overlap {job.overlap} · catch-up {job.catch_up} · jitter "
             f"{describe_seconds(job.jitter_s) if job.jitter_s else 'none'}", "dim"),
    ]
    if job.context_from:
        lines.append(Text(f"reads the latest results of: {', '.join(job.context_from)}"))
    if job.deliver:
        lines.append(Text(f"delivers to: {', '.join(job.deliver)}"))
    return lines


def job_view(detail: CronJobDetail) -> RenderableType:
    job = detail.job
    state = Text("enabled", "green") if job.enabled else Text("disabled", "dim")
    parts: list[RenderableType] = [
        Text.assemble((f"cron job {job.name}", "bold"), "  ", (job.kind, "blue"), "  ", state),
        Text(detail.description),
        *settings_lines(job),
        Text(f"last fire {when(job.last_fire_at, job.timezone)}", "dim"),
        Text.assemble(("card: ", "bold"), job.title),
    ]
    if job.command:
        parts.append(Text.assemble(("script: ", "bold"), job.command))
    if job.goal:
        parts.append(Text.assemble(("goal: ", "bold"), job.goal))
    parts.append(Text("next fires:", "bold"))
    parts.extend(Text(f"  {when(at, job.timezone)}") for at in detail.next_fires)
    if not detail.next_fires:
        parts.append(Text("  none (disabled)", "dim"))
    if detail.undelivered:
        parts.append(deliveries_table(detail.undelivered, "deliveries not yet delivered"))
    parts.append(fires_table(detail.fires, job.timezone) if detail.fires
                 else Text("no fires yet", "dim"))
    return Group(*parts)


def fires_table(fires: Sequence[FireRecord], timezone: str,
                title: str = "recent fires") -> Table:
    """One row per fire: when, its card (`run` marks `kanban cron run`), what became of it."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left",
                  title=title)
    table.add_column("fired", no_wrap=True, min_width=16)
    table.add_column("card", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("took", no_wrap=True, justify="right")
    table.add_column("tokens", no_wrap=True, justify="right")
    table.add_column("delivery", overflow="fold", max_width=28)
    table.add_column("result", overflow="fold", max_width=60)
    for fire in fires:
        card = f"#{fire.card_id}" if fire.card_id else "-"
        if fire.manual:
            card += " run"
        state = fire.card_status or fire.outcome
        if fire.slots > 1:
            state += f" ×{fire.slots}"
        took = f"{fire.duration_s:.1f}s" if fire.duration_s is not None else "-"
        tokens = (f"{fire.input_tokens}/{fire.output_tokens}"
                  if fire.input_tokens or fire.output_tokens else "-")
        table.add_row(when(fire.fired_at, timezone), card,
                      Text(state, STATUS_STYLE.get(state, "dim")), took, tokens,
                      delivery_summary(fire.deliveries),
                      " ".join((fire.result or fire.error or fire.reason or "").split())[:120])
    return table


def delivery_summary(deliveries: Sequence[DeliveryRecord]) -> Text:
    if not deliveries:
        return Text("-", "dim")
    text = Text()
    for n, d in enumerate(deliveries):
        if n:
            text.append(", ")
        kind = d.target.split(":", 1)[0]
        tries = f" ×{d.attempts}" if d.attempts > 1 else ""
        text.append(f"{kind} {d.state}{tries}", _DELIVERY_STYLE.get(d.state, ""))
    return text


def deliveries_table(deliveries: Sequence[DeliveryRecord], title: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left",
                  title=title)
    for column in ("id", "card", "target", "status", "attempts", "next try", "last error"):
        table.add_column(column, no_wrap=column not in ("target", "last error"),
                         overflow="fold")
    for d in deliveries:
        retry = when(d.next_attempt_at) if d.state in ("pending", "sending") else "-"
        table.add_row(str(d.id), f"#{d.card_id}", d.target,
                      Text(d.state, _DELIVERY_STYLE.get(d.state, "")), str(d.attempts), retry,
                      d.last_error or "")
    return table


def tick_view(fired: Sequence[FireResult], attempts: Sequence[Attempt]) -> RenderableType:
    lines = [Text(f"{r.job}: {r.outcome}" + (f" #{r.card_id}" if r.card_id else "")
                  + (f" ({r.reason})" if r.reason else "")) for r in fired]
    lines += [Text(f"{a.job if a.source == 'cron' else 'notification ' + a.label[1]}: "
                   f"delivery {a.delivery_id} to {a.target}: {a.status}"
                   + (f" ({a.error})" if a.error else "")) for a in attempts]
    return Group(*lines) if lines else Text("nothing was due", "dim")


def upcoming_view(fires: Sequence[UpcomingFire], now: datetime) -> RenderableType:
    """For `kanban status`: the next cron fires."""
    if not fires:
        return Text("cron: nothing scheduled", "dim")
    lines = [Text("next cron fires:", "bold")]
    for fire in fires:
        overdue = Text(" (overdue: no dispatcher fired it)", "yellow") if fire.at < now else ""
        lines.append(Text.assemble(f"  {when(fire.at, fire.timezone)}  {fire.job}",
                                   (f" on {fire.board}", "dim"), overdue))
    return Group(*lines)
