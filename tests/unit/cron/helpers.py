"""A simulated clock for schedules: step next_fire_after over a window."""

from __future__ import annotations

from datetime import datetime

from kanban.cron.schedule import Schedule, next_fire_after


def fires_between(
    schedule: Schedule, start: datetime, end: datetime, *, anchor: datetime | None = None
) -> list[datetime]:
    """Every fire time in (start, end], found the way a dispatcher would: one after another."""
    anchor = anchor or start
    fired: list[datetime] = []
    fire = next_fire_after(schedule, start, anchor=anchor)
    while fire is not None and fire <= end:
        assert not fired or fire > fired[-1], f"fire times went backwards or repeated at {fire}"
        assert len(fired) < 10_000, "runaway schedule"
        fired.append(fire)
        fire = next_fire_after(schedule, fire, anchor=anchor)
    return fired
