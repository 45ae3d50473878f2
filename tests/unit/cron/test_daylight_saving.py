"""Cron schedules across daylight-saving changes (2025 dates).

Chosen behaviour: a wall time skipped by spring-forward fires once, shifted forward by the
gap (02:30 runs at 03:30 local). On fall-back a fixed-hour job fires only at the first
occurrence of the repeated wall time; an hour-wildcard job follows elapsed time and fires in
both copies of the repeated hour. Intervals are elapsed time and ignore the zone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from kanban.cron.schedule import parse_schedule
from tests.unit.cron.helpers import fires_between

BERLIN = ZoneInfo("Europe/Berlin")  # 2025-03-30 02:00->03:00, 2025-10-26 03:00->02:00
NEW_YORK = ZoneInfo("America/New_York")  # 2025-03-09 02:00->03:00, 2025-11-02 02:00->01:00


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local_times(fired: list[datetime], zone: ZoneInfo) -> list[str]:
    return [fire.astimezone(zone).strftime("%m-%d %H:%M %Z") for fire in fired]


def test_skipped_wall_time_fires_once_shifted_by_the_gap() -> None:
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin", now=utc(2025, 3, 1))
    fired = fires_between(schedule, utc(2025, 3, 28), utc(2025, 4, 1))
    assert fired == [utc(2025, 3, 28, 1, 30), utc(2025, 3, 29, 1, 30), utc(2025, 3, 30, 1, 30),
                     utc(2025, 3, 31, 0, 30)]  # fmt: skip
    assert local_times(fired, BERLIN) == [
        "03-28 02:30 CET",
        "03-29 02:30 CET",
        "03-30 03:30 CEST",
        "03-31 02:30 CEST",
    ]


def test_skipped_wall_time_in_new_york() -> None:
    schedule = parse_schedule("30 2 * * *", "America/New_York", now=utc(2025, 3, 1))
    fired = fires_between(schedule, utc(2025, 3, 8), utc(2025, 3, 11))
    assert local_times(fired, NEW_YORK) == ["03-08 02:30 EST", "03-09 03:30 EDT", "03-10 02:30 EDT"]


def test_repeated_wall_time_fires_once_on_fall_back() -> None:
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin", now=utc(2025, 10, 1))
    fired = fires_between(schedule, utc(2025, 10, 25), utc(2025, 10, 28))
    # 02:30 happens at 00:30Z (CEST) and again at 01:30Z (CET); only the first fires
    assert fired == [utc(2025, 10, 25, 0, 30), utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)]
    assert local_times(fired, BERLIN) == ["10-25 02:30 CEST", "10-26 02:30 CEST", "10-27 02:30 CET"]


def test_repeated_wall_time_in_new_york() -> None:
    schedule = parse_schedule("30 1 * * *", "America/New_York", now=utc(2025, 10, 1))
    fired = fires_between(schedule, utc(2025, 11, 1), utc(2025, 11, 4))
    assert local_times(fired, NEW_YORK) == ["11-01 01:30 EDT", "11-02 01:30 EDT", "11-03 01:30 EST"]


def test_fixed_hour_with_every_minute_skips_the_whole_repeated_hour() -> None:
    schedule = parse_schedule("* 2 * * *", "Europe/Berlin", now=utc(2025, 10, 1))
    day = fires_between(schedule, utc(2025, 10, 25, 22), utc(2025, 10, 26, 23))
    assert len(day) == 60
    assert day[0] == utc(2025, 10, 26, 0, 0) and day[-1] == utc(2025, 10, 26, 0, 59)


def test_hour_wildcard_follows_elapsed_time() -> None:
    schedule = parse_schedule("*/30 * * * *", "Europe/Berlin", now=utc(2025, 3, 1))
    # local midnight to midnight: 25 hours on fall-back day, 23 on spring-forward day
    long_day = fires_between(schedule, utc(2025, 10, 25, 22), utc(2025, 10, 26, 23))
    short_day = fires_between(schedule, utc(2025, 3, 29, 23), utc(2025, 3, 30, 22))
    assert len(long_day) == 50
    assert len(short_day) == 46
    for fired in (long_day, short_day):
        assert all(b - a == timedelta(minutes=30) for a, b in zip(fired, fired[1:], strict=False))


def test_nine_am_stays_nine_am_local_across_both_changes() -> None:
    schedule = parse_schedule("0 9 * * *", "America/New_York", now=utc(2025, 3, 1))
    spring = fires_between(schedule, utc(2025, 3, 7), utc(2025, 3, 11))
    fall = fires_between(schedule, utc(2025, 10, 31), utc(2025, 11, 4))
    assert [fire.hour for fire in spring] == [14, 14, 13, 13]
    assert [fire.hour for fire in fall] == [13, 13, 14, 14]
    for fire in spring + fall:
        assert fire.astimezone(NEW_YORK).strftime("%H:%M") == "09:00"


def test_daily_interval_is_elapsed_time_not_wall_time() -> None:
    created = datetime(2025, 3, 29, 9, 0, tzinfo=BERLIN)
    schedule = parse_schedule("every 1d", "Europe/Berlin", now=created)
    end = created.astimezone(UTC) + timedelta(days=2)
    fired = fires_between(schedule, created, end, anchor=created)
    assert local_times(fired, BERLIN) == ["03-30 10:00 CEST", "03-31 10:00 CEST"]
