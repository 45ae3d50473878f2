"""parse_schedule and describe: every accepted spec form, and every rejected one by name."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kanban.cron.schedule import (
    InvalidSchedule,
    ScheduleKind,
    describe,
    first_fire,
    parse_schedule,
)
from kanban.state.errors import KanbanError

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "cron_fields"),
    [
        # minute to month are APScheduler's to read: handed over as typed (lower case)
        ("*/5 * * * *", ("*/5", "*", "*", "*", "*")),
        ("  0   9 * JAN-mar * ", ("0", "9", "*", "jan-mar", "*")),
        ("5/20 0-6/3 1,15 * *", ("5/20", "0-6/3", "1,15", "*", "*")),
        ("0 0 last * *", ("0", "0", "last", "*", "*")),
        # day of week keeps crontab's numbering (0 and 7 are sunday), as APScheduler names
        ("0 9 * * mon-fri", ("0", "9", "*", "*", "mon,tue,wed,thu,fri")),
        ("0 9 * * 1-5", ("0", "9", "*", "*", "mon,tue,wed,thu,fri")),
        ("0 9 * * 0", ("0", "9", "*", "*", "sun")),
        ("0 9 * * 7", ("0", "9", "*", "*", "sun")),
        ("0 9 * * */2", ("0", "9", "*", "*", "sun,tue,thu,sat")),
        ("0 9 * * 5/2", ("0", "9", "*", "*", "sun,fri")),
        ("0 9 * * sun-tue", ("0", "9", "*", "*", "sun,mon,tue")),
        ("0 9 * * SUN", ("0", "9", "*", "*", "sun")),
        ("@hourly", ("0", "*", "*", "*", "*")),
        ("@daily", ("0", "0", "*", "*", "*")),
        ("@weekly", ("0", "0", "*", "*", "sun")),
        ("@monthly", ("0", "0", "1", "*", "*")),
        ("@yearly", ("0", "0", "1", "1", "*")),
        ("0 0 29 2 *", ("0", "0", "29", "2", "*")),
    ],
)
def test_cron_specs_parse_to_apscheduler_fields(spec: str, cron_fields: tuple[str, ...]) -> None:
    schedule = parse_schedule(spec, "Europe/Berlin", now=NOW)
    assert schedule.kind is ScheduleKind.CRON
    assert schedule.spec == spec
    assert schedule.timezone == "Europe/Berlin"
    assert schedule.cron_fields == cron_fields


def test_cron_day_fields_combine_like_posix_cron() -> None:
    assert parse_schedule("0 0 13 * fri", now=NOW).cron_day_or
    assert not parse_schedule("0 0 13 * *", now=NOW).cron_day_or
    assert not parse_schedule("0 0 * * fri", now=NOW).cron_day_or


@pytest.mark.parametrize(
    ("spec", "seconds"),
    [
        ("every 30s", 30),
        ("every 15m", 900),
        ("every 2h", 7200),
        ("every 1d", 86400),
        ("every 1w", 604800),
        ("every 2 hours", 7200),
        ("every 90 seconds", 90),
        ("EVERY 1.5h", 5400),
        ("every hour", 3600),
        ("every   10   min", 600),
    ],
)
def test_interval_specs(spec: str, seconds: int) -> None:
    schedule = parse_schedule(spec, now=NOW)
    assert schedule.kind is ScheduleKind.INTERVAL
    assert schedule.interval_seconds == seconds


@pytest.mark.parametrize(
    ("spec", "timezone", "fire_at"),
    [
        ("in 30m", "UTC", datetime(2025, 6, 1, 12, 30, tzinfo=UTC)),
        ("in 2 days", "Asia/Tokyo", datetime(2025, 6, 3, 12, 0, tzinfo=UTC)),
        ("2026-12-01T09:00", "UTC", datetime(2026, 12, 1, 9, 0, tzinfo=UTC)),
        ("2026-12-01T09:00", "Europe/Berlin", datetime(2026, 12, 1, 8, 0, tzinfo=UTC)),
        ("2026-07-01 09:00", "America/New_York", datetime(2026, 7, 1, 13, 0, tzinfo=UTC)),
        ("2026-12-01T09:00:00+02:00", "America/New_York", datetime(2026, 12, 1, 7, tzinfo=UTC)),
        ("2026-12-01T09:00Z", "Europe/Berlin", datetime(2026, 12, 1, 9, 0, tzinfo=UTC)),
        ("2026-12-01", "UTC", datetime(2026, 12, 1, 0, 0, tzinfo=UTC)),
        # an ambiguous fall-back wall time means its first occurrence
        ("2025-10-26T02:30", "Europe/Berlin", datetime(2025, 10, 26, 0, 30, tzinfo=UTC)),
    ],
)
def test_one_shot_specs_resolve_to_a_utc_instant(
    spec: str, timezone: str, fire_at: datetime
) -> None:
    schedule = parse_schedule(spec, timezone, now=NOW)
    assert schedule.kind is ScheduleKind.ONCE
    assert schedule.fire_at == fire_at
    assert schedule.fire_at is not None and schedule.fire_at.utcoffset() is not None


INVALID = [
    ("", "UTC", "invalid schedule '': the schedule is empty"),
    ("   ", "UTC", "the schedule is empty"),
    ("hello", "UTC", "invalid schedule 'hello': expected a 5-field cron expression"),
    ("tomorrow at 9", "UTC", "expected 5 fields"),
    ("* * * *", "UTC", "expected 5 fields (minute hour day-of-month month day-of-week), got 4"),
    ("0 * * * * *", "UTC", "expected 5 fields (minute hour day-of-month month day-of-week), got 6"),
    ("61 * * * *", "UTC", "invalid cron expression '61 * * * *': minute: the last value (61) "
                          "is higher than the maximum value (59)"),
    ("0 24 * * *", "UTC", "hour: the last value (24) is higher than the maximum value (23)"),
    ("0 0 0 * *", "UTC", "day of month: the first value (0) is lower than the minimum value (1)"),
    ("0 0 32 * *", "UTC", "day of month: the last value (32) is higher than the maximum"),
    ("0 0 * 13 *", "UTC", "month: the last value (13) is higher than the maximum value (12)"),
    ("0 0 * * 8", "UTC", "day of week: must be 0-7 or sun-sat, got 8"),
    ("0 0 * * funday", "UTC", "day of week: 'funday' is not a number or sun-sat"),
    ("0 0 * jan2 *", "UTC", "month: cannot read 'jan2'"),
    ("0 0 * jan-jun/2 *", "UTC", "month: cannot read 'jan-jun/2' (names take no numbers"),
    ("0 0 * foo *", "UTC", 'month: Invalid month name "foo"'),
    ("0 0 lastx * *", "UTC", "day of month: cannot read 'lastx'"),
    ("30-10 * * * *", "UTC", "minute: The minimum value in a range must not be higher"),
    ("0 0 * * fri-mon", "UTC", "day of week: range 'fri-mon' runs backwards"),
    ("*/0 * * * *", "UTC", "minute: Increment must be higher than 0"),
    ("0 0 * * */0", "UTC", "day of week: step in '*/0' must be a positive number"),
    ("1,,2 * * * *", "UTC", "minute: Unrecognized expression \"\" for field \"minute\""),
    ("@reboot", "UTC", "unknown alias"),
    ("every 5x", "UTC", "unknown unit 'x' (use s, m, h, d or w)"),
    ("every 5 fortnights", "UTC", "unknown unit 'fortnights'"),
    ("every 5", "UTC", "missing unit"),
    ("every", "UTC", "expected 'every <number><unit>'"),
    ("every 0m", "UTC", "invalid schedule 'every 0m': interval must be positive"),
    ("every -5m", "UTC", "interval must be positive"),
    ("every 0.5s", "UTC", "interval must be at least 1 second"),
    ("every 1.5s", "UTC", "interval must be a whole number of seconds"),
    ("every 20000d", "UTC", "interval must be at most 3650 days"),
    ("in 0s", "UTC", "delay must be positive"),
    ("in soon", "UTC", "unknown unit 'soon'"),
    ("2020-01-01T00:00", "UTC", "one-shot time 2020-01-01T00:00 is in the past"),
    ("2025-06-01T11:59:59Z", "UTC", "is in the past (now is 2025-06-01 12:00 UTC)"),
    ("2026-13-01T09:00", "UTC", "not an ISO 8601 time (month must be in 1..12)"),
    ("2026-03-29T02:30", "Europe/Berlin", "2026-03-29T02:30 does not exist in Europe/Berlin"),
    ("every 15m", "Mars/Base", "unknown timezone 'Mars/Base'"),
    ("0 9 * * *", "", "unknown timezone ''"),
    ("0 9 * * *", "/etc/passwd", "unknown timezone '/etc/passwd'"),
    ("0 9 * * *", "europe/berlin", "unknown timezone 'europe/berlin'"),
]


@pytest.mark.parametrize(("spec", "timezone", "message"), INVALID)
def test_invalid_specs_name_the_problem(spec: str, timezone: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_schedule(spec, timezone, now=NOW)
    assert message in str(caught.value)
    assert isinstance(caught.value, KanbanError)
    assert caught.value.message == str(caught.value)


def test_past_one_shot_reloads_with_allow_past() -> None:
    schedule = parse_schedule("2020-01-01T00:00", now=NOW, allow_past=True)
    assert schedule.fire_at == datetime(2020, 1, 1, tzinfo=UTC)


def test_resolved_spec_pins_a_relative_one_shot() -> None:
    schedule = parse_schedule("in 30m", "Europe/Berlin", now=NOW)
    later = datetime(2025, 6, 1, 12, 10, tzinfo=UTC)
    reloaded = parse_schedule(schedule.resolved_spec, "Europe/Berlin", now=later)
    assert reloaded.fire_at == schedule.fire_at
    assert parse_schedule("every 2h", now=NOW).resolved_spec == "every 2h"


def test_naive_now_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="now must be a timezone-aware datetime"):
        parse_schedule("every 15m", now=datetime(2025, 6, 1, 12, 0))


@pytest.mark.parametrize(
    ("spec", "timezone", "description"),
    [
        ("every 15m", "UTC", "every 15 minutes"),
        ("every 1m", "UTC", "every minute"),
        ("every 2h", "Europe/Berlin", "every 2 hours"),
        ("every 90m", "UTC", "every 90 minutes"),
        ("every 1d", "UTC", "every day"),
        ("every 14d", "UTC", "every 2 weeks"),
        ("every 1s", "UTC", "every second"),
        ("every 45s", "UTC", "every 45 seconds"),
        ("0 9 * * mon-fri", "Europe/Berlin", "cron 0 9 * * mon-fri (Europe/Berlin)"),
        ("@daily", "UTC", "cron @daily (UTC)"),
        ("2026-12-01T09:00", "UTC", "once at 2026-12-01 09:00 UTC"),
        ("2026-12-01T09:00Z", "Europe/Berlin", "once at 2026-12-01 10:00 Europe/Berlin"),
        ("2026-12-01T09:00:30", "UTC", "once at 2026-12-01 09:00:30 UTC"),
    ],
)
def test_describe(spec: str, timezone: str, description: str) -> None:
    assert describe(parse_schedule(spec, timezone, now=NOW)) == description


def test_schedules_are_frozen_values() -> None:
    schedule = parse_schedule("every 15m", now=NOW)
    assert schedule == parse_schedule("every 15m", now=NOW)
    with pytest.raises(AttributeError):
        schedule.spec = "every 1m"  # type: ignore[misc]


def test_an_expression_that_never_fires_is_refused_when_first_scheduled() -> None:
    schedule = parse_schedule("0 0 30 feb *", now=NOW)  # every field reads fine on its own
    with pytest.raises(InvalidSchedule, match="'0 0 30 feb \\*': it never fires"):
        first_fire(schedule, now=NOW)


def test_apscheduler_reads_every_field() -> None:
    """What APScheduler accepts beyond POSIX reaches it unchanged (here: the last day)."""
    schedule = parse_schedule("0 12 last * *", now=NOW)
    assert first_fire(schedule, now=NOW) == datetime(2025, 6, 30, 12, tzinfo=UTC)
