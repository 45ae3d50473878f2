"""next_fire_after and first_fire for every kind, on an explicit simulated clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from kanban.cron.schedule import first_fire, next_fire_after, parse_schedule
from tests.unit.cron.helpers import fires_between

T0 = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)  # a monday
HOUR = timedelta(hours=1)


def test_every_minute_cron_fires_60_times_in_an_hour() -> None:
    schedule = parse_schedule("* * * * *", now=T0)
    fired = fires_between(schedule, T0, T0 + HOUR)
    assert len(fired) == 60
    assert fired[0] == T0 + timedelta(minutes=1)
    assert fired[-1] == T0 + HOUR
    assert all(b - a == timedelta(minutes=1) for a, b in zip(fired, fired[1:], strict=False))


def test_cron_fire_is_strictly_after() -> None:
    schedule = parse_schedule("0 * * * *", now=T0)
    assert next_fire_after(schedule, T0, anchor=T0) == T0 + HOUR
    just_before = T0 - timedelta(microseconds=1)
    assert next_fire_after(schedule, just_before, anchor=T0) == T0


def test_cron_results_are_utc_even_for_other_zones() -> None:
    schedule = parse_schedule("0 9 * * *", "Asia/Tokyo", now=T0)
    tokyo_noon = datetime(2025, 6, 2, 12, 0, tzinfo=ZoneInfo("Asia/Tokyo"))
    fire = next_fire_after(schedule, tokyo_noon, anchor=T0)
    assert fire == datetime(2025, 6, 3, 0, 0, tzinfo=UTC)
    assert fire is not None and fire.tzinfo is UTC


def test_every_15m_is_anchored_to_creation() -> None:
    created = T0 + timedelta(minutes=7, seconds=3)
    schedule = parse_schedule("every 15m", now=created)
    assert first_fire(schedule, now=created) == created + timedelta(minutes=15)
    fired = fires_between(schedule, created, created + HOUR, anchor=created)
    assert fired == [created + timedelta(minutes=15 * k) for k in range(1, 5)]


def test_every_2h_keeps_its_anchor_after_a_late_fire() -> None:
    created = T0 + timedelta(minutes=20)
    schedule = parse_schedule("every 2h", now=created)
    # the dispatcher ran 35 minutes late; the next slot stays on the creation grid
    late = created + 2 * HOUR + timedelta(minutes=35)
    assert next_fire_after(schedule, late, anchor=created) == created + 4 * HOUR
    fired = fires_between(schedule, created, created + 12 * HOUR, anchor=created)
    assert fired == [created + 2 * k * HOUR for k in range(1, 7)]


def test_interval_before_its_anchor_fires_one_interval_after_it() -> None:
    schedule = parse_schedule("every 2h", now=T0)
    assert next_fire_after(schedule, T0 - 5 * HOUR, anchor=T0) == T0 + 2 * HOUR


def test_weekday_numbers_follow_posix_cron_not_apscheduler() -> None:
    # APScheduler 3.x alone would read 1-5 as tuesday-saturday
    schedule = parse_schedule("0 9 * * 1-5", now=T0)
    saturday = datetime(2025, 6, 7, 0, 0, tzinfo=UTC)
    week = fires_between(schedule, saturday, saturday + 7 * 24 * HOUR)
    days = [fire.strftime("%a") for fire in week]
    assert days == ["Mon", "Tue", "Wed", "Thu", "Fri"]
    sundays = parse_schedule("0 9 * * 0,7", now=T0)
    assert next_fire_after(sundays, saturday, anchor=T0) == datetime(2025, 6, 8, 9, tzinfo=UTC)


def test_day_of_month_or_day_of_week_fires_on_either() -> None:
    schedule = parse_schedule("0 0 13 * fri", now=T0)
    june = datetime(2025, 6, 1, tzinfo=UTC)
    fired = fires_between(schedule, june, datetime(2025, 7, 1, tzinfo=UTC))
    assert [fire.day for fire in fired] == [6, 13, 20, 27]
    july = fires_between(schedule, june.replace(month=7), datetime(2025, 7, 31, tzinfo=UTC))
    assert [fire.day for fire in july] == [4, 11, 13, 18, 25]


def test_leap_day_cron_waits_for_a_leap_year() -> None:
    schedule = parse_schedule("0 0 29 2 *", now=T0)
    assert first_fire(schedule, now=T0) == datetime(2028, 2, 29, tzinfo=UTC)


@pytest.mark.parametrize(
    "spec", ["in 30m", "2025-06-02T12:30:00Z", "2025-06-02T14:30:00+02:00", "2025-06-02T14:30"]
)
def test_one_shot_fires_once_at_its_instant(spec: str) -> None:
    schedule = parse_schedule(spec, "Europe/Berlin", now=T0)
    instant = T0 + timedelta(minutes=30)
    assert first_fire(schedule, now=T0) == instant
    assert next_fire_after(schedule, T0, anchor=T0) == instant
    assert next_fire_after(schedule, instant - timedelta(seconds=1), anchor=T0) == instant
    assert next_fire_after(schedule, instant, anchor=T0) is None
    assert next_fire_after(schedule, instant + HOUR, anchor=T0) is None


def test_first_fire_of_an_overdue_one_shot_is_its_instant() -> None:
    schedule = parse_schedule("in 5m", now=T0)
    assert first_fire(schedule, now=T0 + HOUR) == T0 + timedelta(minutes=5)


def test_first_fire_is_strictly_after_creation() -> None:
    assert first_fire(parse_schedule("0 12 * * *", now=T0), now=T0) == T0 + 24 * HOUR
    assert first_fire(parse_schedule("every 30s", now=T0), now=T0) == T0 + timedelta(seconds=30)


@pytest.mark.parametrize("spec", ["* * * * *", "every 15m", "in 30m"])
def test_naive_times_are_programming_errors(spec: str) -> None:
    schedule = parse_schedule(spec, now=T0)
    naive = datetime(2025, 6, 2, 12, 0)
    with pytest.raises(ValueError, match="after must be a timezone-aware datetime"):
        next_fire_after(schedule, naive, anchor=T0)
    with pytest.raises(ValueError, match="anchor must be a timezone-aware datetime"):
        next_fire_after(schedule, T0, anchor=naive)
    with pytest.raises(ValueError, match="now must be a timezone-aware datetime"):
        first_fire(schedule, now=naive)
