"""Cron job schedules: parse a spec, describe it, and compute its fire times (pure, no I/O).

Specs: a 5-field cron expression or @alias (read by `cron.crontab`), `every <n><unit>`,
`in <n><unit>` and ISO 8601 times. Every fire time comes from an APScheduler trigger:
CronTrigger in the job's timezone, IntervalTrigger anchored to a whole second (its float
arithmetic is exact there, and with microseconds it can repeat a slot), DateTrigger for
one-shots.

Daylight saving (cron only): a wall time skipped by spring-forward fires once, shifted
forward by the gap (02:30 becomes 03:30 local), as APScheduler does. On fall-back a job with
a fixed hour fires only at the first occurrence of the repeated wall time; a job whose hour
field is `*` follows elapsed time and fires in both copies of the repeated hour.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kanban.cron.crontab import cron_triggers, read_crontab
from kanban.cron.durations import DurationError, parse_seconds
from kanban.state.errors import KanbanError

MISSED_COUNT_CAP = 1000
"""coalesce() stops counting missed cron slots here; the count then means "this many or more"."""

MAX_INTERVAL = timedelta(days=3650)
_ONE_US = timedelta(microseconds=1)
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
    # minute, hour, day, month, day_of_week as APScheduler reads them (weekdays by name)
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
    keyword = "every" if what == "interval" else "in"
    try:
        seconds = parse_seconds(rest, what, example=f"{keyword} 15m")
    except DurationError as exc:
        raise InvalidSchedule(f"invalid schedule '{spec}': {exc.message}") from None
    if seconds > MAX_INTERVAL.total_seconds():
        raise InvalidSchedule(
            f"invalid schedule '{spec}': {what} must be at most {MAX_INTERVAL.days} days"
        )
    return seconds


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
        cron_fields, day_or = read_crontab(expression)
    except ValueError as exc:
        raise InvalidSchedule(f"invalid cron expression '{spec}': {exc}") from None
    return Schedule(spec, timezone, ScheduleKind.CRON, cron_fields=cron_fields, cron_day_or=day_or)


@lru_cache(maxsize=1024)
def _interval_trigger(seconds: int, anchor: datetime) -> Any:
    from apscheduler.triggers.interval import IntervalTrigger

    # Never the anchor itself: the first fire is one interval after it.
    return IntervalTrigger(seconds=seconds, start_date=anchor + timedelta(seconds=seconds),
                           timezone=UTC)


@lru_cache(maxsize=1024)
def _date_trigger(fire_at: datetime) -> Any:
    from apscheduler.triggers.date import DateTrigger

    return DateTrigger(run_date=fire_at, timezone=UTC)


# -- fire times -------------------------------------------------------------------------


def whole_second(moment: datetime) -> datetime:
    """An interval's anchor: APScheduler's interval arithmetic is exact on whole seconds."""
    return moment.astimezone(UTC).replace(microsecond=0)


def next_fire_after(schedule: Schedule, after: datetime, *, anchor: datetime) -> datetime | None:
    """The first fire time strictly after `after` (UTC), or None once a one-shot has passed."""
    _require_aware("after", after)
    _require_aware("anchor", anchor)
    # in UTC, because aware arithmetic within one zone is wall-clock arithmetic
    after = after.astimezone(UTC)
    if schedule.kind is ScheduleKind.INTERVAL:
        trigger = _interval_trigger(_seconds(schedule), whole_second(anchor))
        fire: datetime = trigger.get_next_fire_time(None, after + _ONE_US)
        return fire.astimezone(UTC)
    if schedule.kind is ScheduleKind.ONCE:
        fire_at = _date_trigger(_fire_at(schedule)).get_next_fire_time(None, after)
        return fire_at.astimezone(UTC) if fire_at > after else None
    return _next_cron_fire(schedule, after)


def first_fire(schedule: Schedule, *, now: datetime) -> datetime:
    """The first fire time of a job created (or rescheduled) at `now`."""
    _require_aware("now", now)
    if schedule.kind is ScheduleKind.ONCE:
        return _fire_at(schedule)
    fire = next_fire_after(schedule, now, anchor=now)
    if fire is None:  # only a cron expression naming a day that never comes, such as 30 feb
        raise InvalidSchedule(f"invalid cron expression '{schedule.spec}': it never fires")
    return fire


def coalesce(
    schedule: Schedule, next_fire_at: datetime, now: datetime, *, anchor: datetime
) -> tuple[int, datetime | None]:
    """(slots due in [next_fire_at, now], at least 1, capped for cron; next fire after now)."""
    for name, value in (("next_fire_at", next_fire_at), ("now", now), ("anchor", anchor)):
        _require_aware(name, value)
    next_fire_at, now = next_fire_at.astimezone(UTC), now.astimezone(UTC)
    if next_fire_at > now:
        raise ValueError(f"coalesce() needs a due job: next_fire_at {next_fire_at} > now {now}")
    following = next_fire_after(schedule, now, anchor=anchor)
    if schedule.kind is ScheduleKind.ONCE:
        return 1, following
    if schedule.kind is ScheduleKind.INTERVAL:
        # slot k is anchor + k·interval: count the slot numbers between the two instants
        interval, start = timedelta(seconds=_seconds(schedule)), whole_second(anchor)
        first_slot = max(1, -((start - next_fire_at) // interval))  # ceil division
        last_slot = (now - start) // interval
        return max(1, last_slot - first_slot + 1), following
    missed, fire = 1, next_fire_at
    while missed < MISSED_COUNT_CAP:
        upcoming = _next_cron_fire(schedule, fire)
        if upcoming is None or upcoming > now:
            break
        fire = upcoming
        missed += 1
    return missed, following


def due_slots(schedule: Schedule, next_fire_at: datetime, now: datetime, *, anchor: datetime,
              limit: int) -> list[datetime]:
    """The first `limit` slots due in [next_fire_at, now], oldest first."""
    slots: list[datetime] = []
    fire: datetime | None = next_fire_at.astimezone(UTC)
    while fire is not None and fire <= now and len(slots) < limit:
        slots.append(fire)
        fire = next_fire_after(schedule, fire, anchor=anchor)
    return slots


def latest_slot_since(schedule: Schedule, since: datetime, now: datetime, *,
                      anchor: datetime) -> datetime | None:
    """The newest slot in (since, now], or None: for `--catch-up skip` (recent enough)."""
    latest = None
    fire = next_fire_after(schedule, since, anchor=anchor)
    while fire is not None and fire <= now:
        latest = fire
        fire = next_fire_after(schedule, fire, anchor=anchor)
    return latest


def jitter_offset(job: str, slot: datetime, jitter_s: int) -> timedelta:
    """A delay in [0, jitter_s) for one slot of one job, the same in every dispatcher."""
    if jitter_s <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{job}|{slot.astimezone(UTC).isoformat()}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(seconds=int(fraction * jitter_s))


def _next_cron_fire(schedule: Schedule, after: datetime) -> datetime | None:
    assert schedule.cron_fields is not None
    triggers = cron_triggers(schedule.cron_fields, schedule.timezone, schedule.cron_day_or)
    zone = ZoneInfo(schedule.timezone)
    fixed_hour = schedule.cron_fields[1] != "*"
    # a repeated wall time has at most 60 minute slots (more only for a 2h+ fall-back)
    for _ in range(200):
        # APScheduler returns a time >= now; 1µs (rounded up to the next second) makes it strict
        probe = after + _ONE_US
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


def _seconds(schedule: Schedule) -> int:
    assert schedule.interval_seconds is not None
    return schedule.interval_seconds


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
        return f"every {describe_seconds(_seconds(schedule))}"
    if schedule.kind is ScheduleKind.ONCE:
        local = _fire_at(schedule).astimezone(ZoneInfo(schedule.timezone))
        shape = "%Y-%m-%d %H:%M:%S" if local.second or local.microsecond else "%Y-%m-%d %H:%M"
        return f"once at {local.strftime(shape)} {schedule.timezone}"
    return f"cron {' '.join(schedule.spec.split())} ({schedule.timezone})"


def describe_seconds(seconds: int) -> str:
    """'minute', '2 hours', '45 seconds'."""
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return unit if count == 1 else f"{count} {unit}s"
    return "second" if seconds == 1 else f"{seconds} seconds"
