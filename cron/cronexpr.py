"""Reading 5-field cron expressions: each field checked with a message that names it."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class _CronField:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] is the value low + i


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_CRON_FIELDS = (
    _CronField("minute", 0, 59),
    _CronField("hour", 0, 23),
    _CronField("day of month", 1, 31),
    _CronField("month", 1, 12, _MONTHS),
    _CronField("day of week", 0, 7, _WEEKDAYS),  # POSIX numbering: 0 and 7 are sunday
)
_CRON_TERM = re.compile(r"(?:(?P<star>\*)|(?P<first>\w+)(?:-(?P<last>\w+))?)(?:/(?P<step>\w+))?")
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def parse_cron_fields(expression: str) -> tuple[tuple[str, str, str, str, str], bool]:
    """Check a 5-field expression; the fields in APScheduler's terms, and whether the two
    day fields combine with OR (as in standard cron). Raises ValueError naming the problem."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    values = [
        _field_values(field, text) for field, text in zip(_CRON_FIELDS, fields, strict=True)
    ]
    _check_day_exists(values[2], values[3])
    minute, hour, day, month = (
        "*" if text == "*" else ",".join(map(str, sorted(vals)))
        for text, vals in zip(fields[:4], values[:4], strict=True)
    )
    # APScheduler 3.x numbers weekdays from monday; names keep POSIX meaning intact
    weekday = "*" if fields[4] == "*" else ",".join(_WEEKDAYS[v % 7] for v in sorted(values[4]))
    day_or = not fields[2].startswith("*") and not fields[4].startswith("*")
    return (minute, hour, day, month, weekday), day_or


def _field_values(field: _CronField, text: str) -> set[int]:
    values: set[int] = set()
    for term in text.split(","):
        match = _CRON_TERM.fullmatch(term)
        if match is None:
            raise ValueError(f"{field.name}: cannot read '{term}'")
        if match["star"]:
            first, last = field.low, field.high
        else:
            first = _field_value(field, match["first"])
            last = first if match["last"] is None else _field_value(field, match["last"])
            if match["last"] is None and match["step"] is not None:
                last = field.high  # `5/15` means 5-59/15
        if first > last:
            raise ValueError(f"{field.name}: range '{term}' runs backwards")
        step = 1
        if match["step"] is not None:
            if not match["step"].isdigit() or int(match["step"]) < 1:
                raise ValueError(f"{field.name}: step in '{term}' must be a positive number")
            step = int(match["step"])
        values.update(range(first, last + 1, step))
    return values


def _field_value(field: _CronField, token: str) -> int:
    if token.isdigit():
        value = int(token)
    elif token in field.names:
        value = field.names.index(token) + field.low
    else:
        raise ValueError(f"{field.name}: '{token}' is not a number{_names_hint(field)}")
    if not field.low <= value <= field.high:
        raise ValueError(
            f"{field.name} must be {field.low}-{field.high}{_names_hint(field)}, got {token}"
        )
    return value


def _names_hint(field: _CronField) -> str:
    return f" or {field.names[0]}-{field.names[-1]}" if field.names else ""


def _check_day_exists(days: set[int], months: set[int]) -> None:
    longest = max(_MAX_DAYS[month - 1] for month in months)
    if min(days) > longest:
        named = ",".join(_MONTHS[month - 1] for month in sorted(months))
        raise ValueError(f"day of month {min(days)} never occurs in {named}")
