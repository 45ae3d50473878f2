"""Why cron/schedule.py does not hand everything to APScheduler unchecked: each test pins
an APScheduler 3 behaviour that schedule.py works around. When one of them starts failing,
APScheduler changed and the workaround can go."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from kanban.cron.schedule import first_fire, next_fire_after, parse_schedule

MONDAY = datetime(2025, 6, 2, 0, 0, tzinfo=UTC)


def test_from_crontab_numbers_weekdays_from_monday() -> None:
    trigger = CronTrigger.from_crontab("0 9 * * 1", timezone=UTC)
    assert trigger.get_next_fire_time(None, MONDAY).strftime("%A") == "Tuesday"
    ours = first_fire(parse_schedule("0 9 * * 1", now=MONDAY), now=MONDAY)
    assert ours.strftime("%A") == "Monday"  # crontab: 1 is monday, 0 and 7 are sunday


def test_month_and_weekday_names_are_matched_by_prefix() -> None:
    lenient = CronTrigger(month="jan2", day_of_week="mon-fri/2", timezone=UTC)
    assert str(lenient) == "cron[month='jan', day_of_week='mon-fri']"


def test_interval_arithmetic_on_floats_can_repeat_a_slot_unless_anchored_to_a_second() -> None:
    """IntervalTrigger works in float timestamps: with a microsecond anchor the fire after a
    slot is sometimes the slot itself (a second card for it); on whole seconds it is exact."""
    rng = random.Random(1)
    repeats = 0
    for _ in range(20_000):  # 30 of these repeat their slot (measured with this seed)
        anchor = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**13))
        seconds = rng.choice([1, 7, 60, 900, 3600, 7200, 86400, 604800])
        slot = anchor + rng.randrange(1, 10_000) * timedelta(seconds=seconds)
        trigger = IntervalTrigger(seconds=seconds, start_date=anchor, timezone=UTC)
        repeats += trigger.get_next_fire_time(None, slot + timedelta(microseconds=1)) <= slot
    assert repeats > 0
    schedule = parse_schedule("every 7s", now=MONDAY)
    rng = random.Random(2)
    for _ in range(5000):
        anchor = MONDAY + timedelta(microseconds=rng.randrange(10**13))
        slot = next_fire_after(schedule, anchor + timedelta(seconds=rng.randrange(10**6)),
                               anchor=anchor)
        assert slot is not None
        following = next_fire_after(schedule, slot, anchor=anchor)
        assert following == slot + timedelta(seconds=7)
