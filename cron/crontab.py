"""Reading a 5-field crontab expression with APScheduler's own field parser.

Two things are done here before APScheduler sees a field, each pinned by a test in
tests/unit/cron/test_apscheduler_quirks.py: APScheduler 3 numbers weekdays from monday
(crontab: 0 and 7 are sunday), so the day-of-week field is turned into weekday names; and it
matches month and day names by prefix (`jan2` reads as `jan`, `mon-fri/2` as `mon-fri`), so a
term with letters must be names alone.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

# (what a person calls the field, APScheduler's name for it)
_FIELDS = (("minute", "minute"), ("hour", "hour"), ("day of month", "day"),
           ("month", "month"), ("day of week", "day_of_week"))
_POSIX_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_WEEKDAY_TERM = re.compile(r"(?:(?P<star>\*)|(?P<first>\w+)(?:-(?P<last>\w+))?)(?:/(?P<step>\w+))?")
_NAMED_TERM = re.compile(r"[a-z]+(?:-[a-z]+)?")


def read_crontab(expression: str) -> tuple[tuple[str, str, str, str, str], bool]:
    """The five fields as APScheduler reads them, and whether the day fields combine with OR
    (POSIX: when both are restricted). Raises ValueError naming the field at fault."""
    texts = expression.split()
    if len(texts) != 5:
        raise ValueError(f"expected 5 fields (minute hour day-of-month month day-of-week), "
                         f"got {len(texts)}")
    from apscheduler.triggers.cron import CronTrigger  # here: CLI start-up need not load it

    fields = list(texts)
    for index, ((label, name), text) in enumerate(zip(_FIELDS, texts, strict=True)):
        try:
            if name == "day_of_week":
                fields[index] = text = _posix_weekdays(text)
            elif name in ("day", "month"):
                _require_whole_names(text, "last" if name == "day" else None)
            CronTrigger.FIELDS_MAP[name](name, text)  # APScheduler's own reading of the field
        except ValueError as exc:
            raise ValueError(f"{label}: {_reworded(exc)}") from None
    day_or = not texts[2].startswith("*") and not texts[4].startswith("*")
    return (fields[0], fields[1], fields[2], fields[3], fields[4]), day_or


def _posix_weekdays(text: str) -> str:
    """A crontab day-of-week field (0 and 7 are sunday) as APScheduler weekday names."""
    if text == "*":
        return text
    days: set[int] = set()
    for term in text.split(","):
        match = _WEEKDAY_TERM.fullmatch(term)
        if match is None:
            raise ValueError(f"cannot read '{term}'")
        if match["star"]:
            first, last = 0, 6
        else:
            first = _weekday_number(match["first"])
            last = first if match["last"] is None else _weekday_number(match["last"])
            if match["last"] is None and match["step"] is not None:
                last = 7  # `5/2` means 5-7/2
        step = match["step"] or "1"
        if not step.isdigit() or int(step) < 1:
            raise ValueError(f"step in '{term}' must be a positive number")
        if first > last:
            raise ValueError(f"range '{term}' runs backwards")
        days.update(day % 7 for day in range(first, last + 1, int(step)))
    return ",".join(_POSIX_WEEKDAYS[day] for day in sorted(days))


def _weekday_number(token: str) -> int:
    if token in _POSIX_WEEKDAYS:
        return _POSIX_WEEKDAYS.index(token)
    if not token.isdigit():
        raise ValueError(f"'{token}' is not a number or sun-sat")
    if int(token) > 7:
        raise ValueError(f"must be 0-7 or sun-sat, got {token}")
    return int(token)


def _require_whole_names(text: str, only: str | None) -> None:
    """APScheduler matches a name's prefix only; a term with letters must be names alone
    (`only`: the one word the field takes)."""
    for term in text.split(","):
        if not re.search(r"[a-z]", term):
            continue
        if only is not None and term != only:
            raise ValueError(f"cannot read '{term}' (the only word it takes is '{only}')")
        if not _NAMED_TERM.fullmatch(term):
            raise ValueError(f"cannot read '{term}' (names take no numbers or steps)")


def _reworded(exc: ValueError) -> str:
    """APScheduler's message without its 'Error validating expression' preamble."""
    return re.sub(r"^Error validating expression '[^']*': ", "", str(exc))


@lru_cache(maxsize=1024)
def cron_triggers(
    fields: tuple[str, str, str, str, str], timezone: str, day_or: bool
) -> tuple[CronTrigger, ...]:
    """The triggers whose earliest fire is the schedule's; two when either day field may match."""
    from apscheduler.triggers.cron import CronTrigger

    minute, hour, day, month, weekday = fields
    days = [(day, "*"), ("*", weekday)] if day_or else [(day, weekday)]
    zone = ZoneInfo(timezone)
    return tuple(
        CronTrigger(minute=minute, hour=hour, day=dom, month=month, day_of_week=dow,
                    timezone=zone)
        for dom, dow in days
    )
