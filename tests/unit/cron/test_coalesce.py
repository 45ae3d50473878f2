"""coalesce: how many slots a due job missed, and when it fires next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kanban.cron.schedule import MISSED_COUNT_CAP, coalesce, next_fire_after, parse_schedule

T0 = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@pytest.mark.parametrize("spec", ["every 15m", "*/15 * * * *"])
def test_downtime_across_ten_slots_coalesces_into_one_fire(spec: str) -> None:
    schedule = parse_schedule(spec, now=T0)
    next_fire_at = next_fire_after(schedule, T0, anchor=T0)
    assert next_fire_at == T0 + 15 * MINUTE
    now = next_fire_at + 9 * 15 * MINUTE + 5 * MINUTE  # slots at +0, +15 ... +135 were due
    missed, following = coalesce(schedule, next_fire_at, now, anchor=T0)
    assert missed == 10
    assert following == next_fire_at + 10 * 15 * MINUTE
    assert following is not None and following > now


@pytest.mark.parametrize("spec", ["every 15m", "*/15 * * * *"])
def test_a_slot_exactly_at_now_is_counted(spec: str) -> None:
    schedule = parse_schedule(spec, now=T0)
    due = T0 + 15 * MINUTE
    assert coalesce(schedule, due, due, anchor=T0) == (1, due + 15 * MINUTE)
    assert coalesce(schedule, due, due + 15 * MINUTE, anchor=T0) == (2, due + 30 * MINUTE)


def test_on_time_fire_counts_one() -> None:
    schedule = parse_schedule("every 15m", now=T0)
    due = T0 + 15 * MINUTE
    assert coalesce(schedule, due, due + timedelta(seconds=2), anchor=T0) == (1, due + 15 * MINUTE)


def test_one_shot_coalesces_to_one_fire_and_no_next() -> None:
    schedule = parse_schedule("in 30m", now=T0)
    assert schedule.fire_at is not None
    assert coalesce(schedule, schedule.fire_at, T0 + 5 * 60 * MINUTE, anchor=T0) == (1, None)


def test_cron_counting_stops_at_the_cap() -> None:
    schedule = parse_schedule("* * * * *", now=T0)
    now = T0 + timedelta(days=30, seconds=20)
    missed, following = coalesce(schedule, T0 + MINUTE, now, anchor=T0)
    assert missed == MISSED_COUNT_CAP
    assert following == T0 + timedelta(days=30, minutes=1)


def test_interval_counting_is_arithmetic_and_exact() -> None:
    schedule = parse_schedule("every 1s", now=T0)
    now = T0 + timedelta(days=365, milliseconds=500)
    missed, following = coalesce(schedule, T0 + timedelta(seconds=1), now, anchor=T0)
    assert missed == 365 * 86400
    assert following == T0 + timedelta(days=365, seconds=1)


def test_unaligned_next_fire_at_still_counts_itself() -> None:
    schedule = parse_schedule("every 1h", now=T0)
    # a stored time off the anchor grid (e.g. the schedule was edited) is one due fire
    missed, following = coalesce(schedule, T0 + 10 * MINUTE, T0 + 20 * MINUTE, anchor=T0)
    assert (missed, following) == (1, T0 + 60 * MINUTE)


def test_fall_back_repeat_is_not_counted_as_missed() -> None:
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin", now=T0)
    first = datetime(2025, 10, 26, 0, 30, tzinfo=UTC)
    now = datetime(2025, 10, 27, 2, 0, tzinfo=UTC)
    following = datetime(2025, 10, 28, 1, 30, tzinfo=UTC)
    assert coalesce(schedule, first, now, anchor=T0) == (2, following)


def test_not_yet_due_is_a_programming_error() -> None:
    schedule = parse_schedule("every 15m", now=T0)
    with pytest.raises(ValueError, match="needs a due job"):
        coalesce(schedule, T0 + MINUTE, T0, anchor=T0)


def test_naive_datetimes_are_programming_errors() -> None:
    schedule = parse_schedule("every 15m", now=T0)
    naive = datetime(2025, 6, 2, 12, 0)
    with pytest.raises(ValueError, match="next_fire_at must be a timezone-aware"):
        coalesce(schedule, naive, T0, anchor=T0)
    with pytest.raises(ValueError, match="now must be a timezone-aware"):
        coalesce(schedule, T0, naive, anchor=T0)
    with pytest.raises(ValueError, match="anchor must be a timezone-aware"):
        coalesce(schedule, T0, T0, anchor=naive)
