"""Times as people write and read them: when a scheduled card falls due (`--at TIME`,
`--in DURATION`, as aware UTC times), and how long ago or until (`3m`, `in 2h`), the units
the terminal board and the web board both show."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta

from kanban.errors import ValidationError

_UNIT_SECONDS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
MAX_AHEAD = timedelta(days=3660)  # ten years: anything later is a typo
_SPANS = (("d", 86_400), ("h", 3_600), ("m", 60))  # the units shown, largest first


def parse_duration(text: str) -> timedelta:
    """`90s`, `15m`, `2h`, `1d`, `1h30m`, `2 hours`: a positive span of time."""
    spec = text.strip().lower()
    total, pos = 0.0, 0
    while pos < len(spec):
        match = _PART.match(spec, pos)
        if match is None or match.group(2) not in _UNIT_SECONDS:
            raise ValidationError(f"cannot read {text!r} as a duration (try 90s, 15m, 2h, 1d "
                                  "or 1h30m)")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if total <= 0:
        raise ValidationError(f"the duration {text!r} must be more than zero")
    return _bounded(timedelta(seconds=total), text)


def due_in(text: str, now: datetime) -> datetime:
    """`--in DURATION`: that long after now."""
    return now + parse_duration(text)


def due_at(text: str, now: datetime) -> datetime:
    """`--at TIME`: an ISO date-time (local time unless it names an offset), a date (its
    local midnight), or a clock time (its next occurrence, local time)."""
    spec = text.strip()
    clock = _CLOCK.match(spec)
    if clock:
        hour, minute, second = (int(g) if g else 0 for g in clock.groups())
        if hour > 23 or minute > 59 or second > 59:
            raise ValidationError(f"{text!r} is not a time of day")
        local_now = now.astimezone()
        at = _local(datetime.combine(local_now.date(), time(hour, minute, second)))
        return at if at > now else _local(
            datetime.combine(local_now.date() + timedelta(days=1), time(hour, minute, second)))
    try:
        parsed = datetime.fromisoformat(spec.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"cannot read {text!r} as a time (try 2025-06-01T09:00, "
                              "2025-06-01T09:00+02:00, 2025-06-01 or 17:30)") from None
    at = parsed.astimezone(UTC) if parsed.tzinfo else _local(parsed)
    if at <= now:
        raise ValidationError(f"{text!r} is in the past ({at:%Y-%m-%d %H:%M:%S} UTC); "
                              "leave out --at to start at once")
    _bounded(at - now, text)
    return at


def _local(naive: datetime) -> datetime:
    """A wall-clock time on this machine as UTC (the system's rules, DST included)."""
    return naive.astimezone().astimezone(UTC)


def _bounded(span: timedelta, text: str) -> timedelta:
    if span > MAX_AHEAD:
        raise ValidationError(f"{text!r} is more than ten years away")
    return span


def age(since: datetime | None, now: datetime) -> str:
    """A compact age: 12s, 3m, 2h, 5d (`-` for never)."""
    if since is None:
        return "-"
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in _SPANS:
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def until(at: datetime, now: datetime) -> str:
    """How long until a time, to the nearest unit (`in 2h`), or `due` once it has passed."""
    seconds = (at - now).total_seconds()
    if seconds <= 0:
        return "due"
    for unit, size in _SPANS:
        if seconds >= size:
            return f"in {round(seconds / size)}{unit}"
    return f"in {max(1, round(seconds))}s"
