"""Cron jobs: schedules that put cards on the board at set times."""

from __future__ import annotations

from cron.schedule import (
    MISSED_COUNT_CAP,
    InvalidSchedule,
    Schedule,
    ScheduleKind,
    coalesce,
    describe,
    first_fire,
    next_fire_after,
    parse_schedule,
)

__all__ = [
    "MISSED_COUNT_CAP",
    "InvalidSchedule",
    "Schedule",
    "ScheduleKind",
    "coalesce",
    "describe",
    "first_fire",
    "next_fire_after",
    "parse_schedule",
]
