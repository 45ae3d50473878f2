"""Plain-text `kanban status` and `kanban workers`: the database, the counts, the
dispatchers and their breakers, the live workers, the next cron fires and failing
notifications (the same rules as kanban.cli.plain: whole lines, labelled times)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kanban.activity import describe as describe_activity
from kanban.cli.output import one_line, paint, when
from kanban.cli.plain import status_word
from kanban.state.sandbox_paths import reach_lines
from kanban.state.timeutil import utcnow
from kanban.textsafety import visible
from kanban.when import age

if TYPE_CHECKING:
    from kanban.cli.reads import Status
    from kanban.control import DispatcherInfo
    from kanban.cron.manage import UpcomingFire
    from kanban.notify.outbox import FailingTarget
    from kanban.queries import LiveWorker


def status_lines(s: Status, now: datetime | None = None) -> list[str]:
    now = now or utcnow()
    config = s.config if s.config_exists else f"{s.config} (none: defaults)"
    if s.config_error is not None:
        config = paint(f"{s.config} (broken: see the error below)", "bold red")
    lines = [f"kanban {s.version}", f"database: {s.database} ({s.database_source})",
             *([paint(s.journal, "yellow")] if s.journal else
               [f"journal: {s.journal_mode}"] if s.journal_mode else []),
             f"config: {config}", "",
             paint(f"board {s.board}" if s.board else "all boards", "bold")]
    width = max(len(name) for name in [*s.counts, "total"])
    lines += [f"  {status_word(name, width)}  {n:>7,}" for name, n in s.counts.items()]
    lines.append(f"  {'total':<{width}}  {sum(s.counts.values()):>7,}")
    if s.paused_globally:
        lines.append(paint("spawning: paused globally", "bold red"))
    elif s.paused_boards:
        lines.append(paint(f"spawning: paused on {', '.join(s.paused_boards)}", "red"))
    else:
        lines.append(paint("spawning: on", "green"))
    if not s.dispatchers:
        lines.append(paint("no dispatcher (start one with `kanban dispatch`)", "yellow"))
    lines += [paint(f"dispatcher {d.id}: pid {d.pid} on {d.host}"
                    + (f", board {d.board}" if d.board else "")
                    + f", since {when(d.started_at)}, heartbeat {age(d.heartbeat_at, now)} ago",
                    "green") + breaker_text(d) for d in s.dispatchers]
    for d in s.dispatchers:  # the sandbox is a property of each dispatcher's host
        note = s.sandbox.get(d.id)
        if note:
            lines.append(paint(f"  commands: {note}",
                               "green" if note.startswith("bwrap (") else "yellow"))
    for name, data in s.reach.items():  # what each profile's commands can touch
        lines.append(f"profile {name} commands ({data['sandbox']}):")
        lines += [paint(f"  {line}", "dim") for line in reach_lines(data)]
    lines.append(f"live workers: {len(s.workers)}")
    lines += [f"  {line}" for line in worker_lines(s.workers, now)]
    lines += cron_lines(s.next_fires, now)
    lines += notification_lines(s.failing_notifications)
    return lines


def notification_lines(failing: list[FailingTarget]) -> list[str]:
    """Targets whose notifications keep failing: kept and retried, never dropped."""
    lines = []
    for f in failing:
        held = ", ".join(part for part in (f"{f.retrying} retrying" if f.retrying else "",
                                           f"{f.failed} failed (`kanban notify redeliver`)"
                                           if f.failed else "") if part)
        lines.append(paint(f"notifications to {visible(f.target, one_line=True)} on "
                           f"{f.board} failing: {held}", "bold red"))
        if f.last_error:
            lines.append(f"  last error: {visible(f.last_error, one_line=True)}")
    return lines


def breaker_text(d: DispatcherInfo) -> str:
    """A dispatcher's open circuit breaker, on the line after it ("" while closed)."""
    if d.breaker is None:
        return ""
    reason, since = d.breaker
    return "\n" + paint(f"  circuit breaker open since {when(since)} (not claiming): {reason}",
                         "bold red")


def zone_time(at: datetime | None, timezone: str = "UTC") -> str:
    """A cron time in its job's timezone, labelled: `2025-03-30 03:30 CEST`."""
    if at is None:
        return "-"
    from zoneinfo import ZoneInfo

    local = at.astimezone(UTC if timezone == "UTC" else ZoneInfo(timezone))
    shape = "%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M"
    return f"{local.strftime(shape)} {local.tzname() or timezone}"


def cron_lines(fires: Sequence[UpcomingFire], now: datetime) -> list[str]:
    """The next cron fires, each in its job's timezone."""
    if not fires:
        return [paint("cron: nothing scheduled", "dim")]
    lines = ["next cron fires:"]
    for fire in fires:
        overdue = paint(" (overdue: no dispatcher fired it)", "yellow") if fire.at < now else ""
        lines.append(f"  {zone_time(fire.at, fire.timezone)}  {fire.job} on {fire.board}"
                     f"{overdue}")
    return lines


def worker_lines(workers: Sequence[LiveWorker], now: datetime) -> list[str]:
    lines = []
    for w in workers:
        data = w.to_json(now)
        beat = f"{data['heartbeat_age_s']:g}s ago" if data["heartbeat_age_s"] is not None else "-"
        doing = describe_activity(w.activity, compact=True)
        lines.append(f"pid {w.pid or '-'}  #{w.card_id} attempt {w.spent}  heartbeat {beat}  "
                     f"running {data['runtime_s']:g}s  {w.title}"
                     + (f"  ▸ {doing}" if doing else "")
                     + (f"  ({one_line(w.progress)})" if w.progress else ""))
    return lines
