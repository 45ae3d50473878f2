"""Cron job schedules: parse a spec, describe it, and compute its fire times (pure, no I/O).

Specs: a 5-field cron expression or @alias, `every <n><unit>`, `in <n><unit>` and ISO 8601
times. Cron fire times come from APScheduler's CronTrigger in the job's timezone; intervals
are exact arithmetic anchored to the job's creation; one-shots are a single UTC instant.

Daylight saving (cron only): a wall time skipped by spring-forward fires once, shifted
forward by the gap (02:30 becomes 03:30 local), as APScheduler does. On fall-back a job with
a fixed hour fires only at the first occurrence of the repeated wall time; a job whose hour
field is `*` follows elapsed time and fires in both copies of the repeated hour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron.cronexpr import parse_cron_fields
from state.errors import KanbanError

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

MISSED_COUNT_CAP = 1000
"""coalesce() stops counting missed cron slots here; the count then means "this many or more"."""

MAX_INTERVAL = timedelta(days=3650)

_UNIT_SECONDS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 604800),
}
_UNIT_HINT = "use s, m, h, d or w"
_AMOUNT_UNIT = re.compile(r"(?P<amount>[-+]?\d+(?:\.\d+)?)?\s*(?P<unit>[a-z]*)")
_ISO_LIKE = re.compile(r"\d{4}-|\d{8}T")
_ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_FORMATS_HINT = (
    "expected a 5-field cron expression (e.g. '*/5 * * * *'), 'every 15m', 'in 30m' "
    "or an ISO 8601 time"
)


class InvalidSchedule(KanbanError):
    """A schedule spec or timezone that cannot be used; the message names the problem."""


class ScheduleKind(StrEnum):
    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule; exactly the fields of its kind are set."""

    spec: str
    timezone: str
    kind: ScheduleKind
    interval_seconds: int | None = None
    # minute, hour, day, month, day_of_week in APScheduler's syntax (weekdays by name)
    cron_fields: tuple[str, str, str, str, str] | None = None
    # both day fields restricted: a day matching either fires (POSIX cron), not both
    cron_day_or: bool = False
    fire_at: datetime | None = None

    @property
    def resolved_spec(self) -> str:
        """A spec that re-parses to this schedule later (`in 30m` becomes its instant)."""
        if self.kind is ScheduleKind.ONCE and self.fire_at is not None:
            return self.fire_at.isoformat()
        return self.spec


# -- parsing ----------------------------------------------------------------------------


def parse_schedule(
    spec: str, timezone: str = "UTC", *, now: datetime, allow_past: bool = False
) -> Schedule:
    """Parse a schedule spec; `allow_past` re-loads a stored one-shot that is already due."""
    _require_aware("now", now)
    zone = _zone(timezone)
    text = " ".join(spec.split())
    lowered = text.lower()
    if not text:
        raise InvalidSchedule("invalid schedule '': the schedule is empty")
    if lowered == "every" or lowered.startswith("every "):
        seconds = _duration_seconds(spec, lowered[len("every") :], "interval")
        return Schedule(spec, timezone, ScheduleKind.INTERVAL, interval_seconds=seconds)
    if lowered.startswith("in "):
        seconds = _duration_seconds(spec, lowered[len("in") :], "delay")
        fire_at = now.astimezone(UTC) + timedelta(seconds=seconds)
        return Schedule(spec, timezone, ScheduleKind.ONCE, fire_at=fire_at)
    if _ISO_LIKE.match(text):
        fire_at = _parse_instant(spec, text, zone)
        if fire_at < now and not allow_past:
            now_utc = f"{now.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
            raise InvalidSchedule(f"one-shot time {text} is in the past (now is {now_utc})")
        return Schedule(spec, timezone, ScheduleKind.ONCE, fire_at=fire_at)
    if lowered.startswith("@"):
        if lowered not in _ALIASES:
            aliases = ", ".join(_ALIASES)
            raise InvalidSchedule(f"invalid schedule '{spec}': unknown alias (use {aliases})")
        return _parse_cron(spec, _ALIASES[lowered], timezone)
    if " " in text or re.fullmatch(r"[\d*/,-]+", text):
        return _parse_cron(spec, lowered, timezone)
    raise InvalidSchedule(f"invalid schedule '{spec}': {_FORMATS_HINT}")


def _zone(timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(f"unknown timezone '{timezone}'") from None


def _duration_seconds(spec: str, rest: str, what: str) -> int:
    """Whole seconds of `<n><unit>` (n defaults to 1: `every hour`)."""
    match = _AMOUNT_UNIT.fullmatch(rest.strip())
    keyword = "every" if what == "interval" else "in"
    if match is None or not (match["amount"] or match["unit"]):
        raise InvalidSchedule(
            f"invalid schedule '{spec}': expected '{keyword} <number><unit>' "
            f"such as '{keyword} 15m' ({_UNIT_HINT})"
        )
    amount, unit = Decimal(match["amount"] or "1"), match["unit"]
    if not unit:
        raise InvalidSchedule(f"invalid schedule '{spec}': missing unit ({_UNIT_HINT})")
    if unit not in _UNIT_SECONDS:
        raise InvalidSchedule(f"invalid schedule '{spec}': unknown unit '{unit}' ({_UNIT_HINT})")
    seconds = amount * _UNIT_SECONDS[unit]
    if seconds <= 0:
        raise InvalidSchedule(f"invalid schedule '{spec}': {what} must be positive")
    if seconds < 1:
        raise InvalidSchedule(f"invalid schedule '{spec}': {what} must be at least 1 second")
    if seconds != seconds.to_integral_value():
        raise InvalidSchedule(
            f"invalid schedule '{spec}': {what} must be a whole number of seconds"
        )
    if seconds > MAX_INTERVAL.total_seconds():
        raise InvalidSchedule(
            f"invalid schedule '{spec}': {what} must be at most {MAX_INTERVAL.days} days"
        )
    return int(seconds)


def _parse_instant(spec: str, text: str, zone: ZoneInfo) -> datetime:
    """An ISO 8601 time as a UTC instant; naive values are wall time in `zone`."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidSchedule(f"invalid schedule '{spec}': not an ISO 8601 time ({exc})") from None
    if parsed.tzinfo is None:
        local = parsed.replace(tzinfo=zone)  # fold=0: an ambiguous time means its first occurrence
        if local.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != parsed:
            raise InvalidSchedule(
                f"invalid schedule '{spec}': {text} does not exist in {zone.key} "
                "(skipped by a daylight-saving change)"
            )
        parsed = local
    return parsed.astimezone(UTC)


# -- cron expressions -------------------------------------------------------------------


def _parse_cron(spec: str, expression: str, timezone: str) -> Schedule:
    try:
        cron_fields, day_or = parse_cron_fields(expression)
        _cron_triggers(cron_fields, timezone, day_or)
    except ValueError as exc:  # our own checks should leave nothing for APScheduler to reject
        raise InvalidSchedule(f"invalid cron expression '{spec}': {exc}") from None
    return Schedule(spec, timezone, ScheduleKind.CRON, cron_fields=cron_fields, cron_day_or=day_or)


@lru_cache(maxsize=1024)
def _cron_triggers(
    fields: tuple[str, str, str, str, str], timezone: str, day_or: bool
) -> tuple[CronTrigger, ...]:
    """The triggers whose earliest fire is the schedule's; two when either day field may match."""
    minute, hour, day, month, weekday = fields
    if day_or:
        expressions = [f"{minute} {hour} {day} {month} *", f"{minute} {hour} * {month} {weekday}"]
    else:
        expressions = [" ".join(fields)]
    from apscheduler.triggers.cron import CronTrigger  # here: CLI start-up need not load it

    return tuple(
        CronTrigger.from_crontab(expr, timezone=ZoneInfo(timezone)) for expr in expressions
    )


# -- fire times -------------------------------------------------------------------------


def next_fire_after(schedule: Schedule, after: datetime, *, anchor: datetime) -> datetime | None:
    """The first fire time strictly after `after` (UTC), or None once a one-shot has passed."""
    _require_aware("after", after)
    _require_aware("anchor", anchor)
    # in UTC, because aware arithmetic within one zone is wall-clock arithmetic
    after, anchor = after.astimezone(UTC), anchor.astimezone(UTC)
    if schedule.kind is ScheduleKind.INTERVAL:
        interval = _interval(schedule)
        slot = max(1, (after - anchor) // interval + 1)
        return anchor + slot * interval
    if schedule.kind is ScheduleKind.ONCE:
        fire_at = _fire_at(schedule)
        return fire_at if fire_at > after else None
    return _next_cron_fire(schedule, after)


def first_fire(schedule: Schedule, *, now: datetime) -> datetime:
    """The first fire time of a job created at `now` (a one-shot fires at its instant)."""
    _require_aware("now", now)
    if schedule.kind is ScheduleKind.ONCE:
        return _fire_at(schedule)
    fire = next_fire_after(schedule, now, anchor=now)
    assert fire is not None, "parse_schedule rejects cron expressions that never fire"
    return fire


def coalesce(
    schedule: Schedule, next_fire_at: datetime, now: datetime, *, anchor: datetime
) -> tuple[int, datetime | None]:
    """(slots due in [next_fire_at, now], at least 1, capped for cron; next fire after now)."""
    for name, value in (("next_fire_at", next_fire_at), ("now", now), ("anchor", anchor)):
        _require_aware(name, value)
    next_fire_at, now, anchor = (value.astimezone(UTC) for value in (next_fire_at, now, anchor))
    if next_fire_at > now:
        raise ValueError(f"coalesce() needs a due job: next_fire_at {next_fire_at} > now {now}")
    following = next_fire_after(schedule, now, anchor=anchor)
    if schedule.kind is ScheduleKind.ONCE:
        return 1, following
    if schedule.kind is ScheduleKind.INTERVAL:
        interval = _interval(schedule)
        first_slot = max(1, -((anchor - next_fire_at) // interval))  # ceil division
        last_slot = (now - anchor) // interval
        return max(1, last_slot - first_slot + 1), following
    missed, fire = 1, next_fire_at
    while missed < MISSED_COUNT_CAP:
        fire = _next_cron_fire(schedule, fire)
        if fire is None or fire > now:
            break
        missed += 1
    return missed, following


def _next_cron_fire(schedule: Schedule, after: datetime) -> datetime | None:
    assert schedule.cron_fields is not None
    triggers = _cron_triggers(schedule.cron_fields, schedule.timezone, schedule.cron_day_or)
    zone = ZoneInfo(schedule.timezone)
    fixed_hour = schedule.cron_fields[1] != "*"
    # a repeated wall time has at most 60 minute slots (more only for a 2h+ fall-back)
    for _ in range(200):
        # APScheduler returns a time >= now; 1µs (rounded up to the next second) makes it strict
        probe = after + timedelta(microseconds=1)
        fires = [t.get_next_fire_time(None, probe) for t in triggers]
        candidates = [fire.astimezone(UTC) for fire in fires if fire is not None]
        if not candidates:
            return None
        fire = min(candidates)
        if not (fixed_hour and _is_repeated_wall_time(fire, zone)):
            return fire
        after = fire
    raise RuntimeError(f"no fire time found for {schedule.spec!r} after {after}")


def _is_repeated_wall_time(instant: datetime, zone: ZoneInfo) -> bool:
    """True for the second occurrence of a wall time that fall-back repeats."""
    local = instant.astimezone(zone)
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def _interval(schedule: Schedule) -> timedelta:
    assert schedule.interval_seconds is not None
    return timedelta(seconds=schedule.interval_seconds)


def _fire_at(schedule: Schedule) -> datetime:
    assert schedule.fire_at is not None
    return schedule.fire_at


def _require_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got naive {value!r}")


# -- description ------------------------------------------------------------------------


def describe(schedule: Schedule) -> str:
    """A short human description: 'every 15 minutes', 'cron 0 9 * * mon-fri (Europe/Berlin)'."""
    if schedule.kind is ScheduleKind.INTERVAL:
        return f"every {_describe_seconds(_interval(schedule))}"
    if schedule.kind is ScheduleKind.ONCE:
        local = _fire_at(schedule).astimezone(ZoneInfo(schedule.timezone))
        shape = "%Y-%m-%d %H:%M:%S" if local.second or local.microsecond else "%Y-%m-%d %H:%M"
        return f"once at {local.strftime(shape)} {schedule.timezone}"
    return f"cron {' '.join(schedule.spec.split())} ({schedule.timezone})"


def _describe_seconds(interval: timedelta) -> str:
    seconds = int(interval.total_seconds())
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return unit if count == 1 else f"{count} {unit}s"
    return "second" if seconds == 1 else f"{seconds} seconds"
