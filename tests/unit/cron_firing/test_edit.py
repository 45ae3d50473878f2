"""`cron edit`: settings change in place, timing changes move the next fire, events say what."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kanban.cron.firing import fire_due_jobs
from kanban.cron.jobs import CronJobNotFound, JobKind, JobSpec
from kanban.cron.schedule import InvalidSchedule
from kanban.cron.service import CronJobs
from kanban.errors import BoardNotFound, ValidationError
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import FakeClock
from tests.unit.cron_firing.helpers import events, job

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def test_a_new_schedule_recomputes_the_next_fire_and_is_recorded(
        jobs: CronJobs, db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("poll", "every 1h", goal="poll"))
    clock.advance(1800)
    edited = jobs.edit("poll", {"schedule": "every 15m"})
    assert edited.next_fire_at == T0 + timedelta(minutes=45)  # 15 minutes from the edit
    assert edited.schedule == "every 15m" and edited.anchor_at == T0 + timedelta(minutes=30)
    [event] = events(db, "cron_edited")
    assert event["data"]["changes"] == {"schedule": ["every 1h", "every 15m"]}
    assert event["data"]["next_fire_at"].startswith("2025-01-01 12:45")
    [fired] = fire_due_jobs(db, clock.advance(900))
    assert fired.scheduled_at == T0 + timedelta(minutes=45)


def test_a_new_timezone_moves_a_cron_job(jobs: CronJobs) -> None:
    jobs.add(JobSpec("morning", "0 9 * * *"))
    edited = jobs.edit("morning", {"timezone": "Asia/Tokyo"})
    assert edited.next_fire_at == datetime(2025, 1, 2, 0, tzinfo=UTC)  # 09:00 JST


def test_other_settings_keep_the_next_fire(jobs: CronJobs, db: Database, clock: FakeClock,
                                           kb: Kanban) -> None:
    jobs.add(JobSpec("poll", "every 1h", goal="poll"))
    before = job(db, "poll").next_fire_at
    clock.advance(600)
    edited = jobs.edit("poll", {"goal": "poll twice", "priority": 3, "model": "scripted:demo",
                                "toolsets": ("kanban",), "max_attempts": 2,
                                "timeout_s": 120.0, "deliver": ("board:1",)})
    assert edited.next_fire_at == before
    assert (edited.goal, edited.priority, edited.model, edited.toolsets) == (
        "poll twice", 3, "scripted:demo", ("kanban",))
    assert (edited.max_attempts, edited.timeout_s, edited.deliver) == (2, 120.0, ("board:1",))
    [event] = events(db, "cron_edited")
    assert set(event["data"]["changes"]) == {"goal", "priority", "model", "toolsets",
                                             "max_attempts", "timeout_s", "deliver"}
    assert event["data"]["changes"]["toolsets"] == [None, ["kanban"]]


def test_a_script_turns_an_agent_job_into_a_script_job_and_back(jobs: CronJobs) -> None:
    jobs.add(JobSpec("job", "@daily", goal="think"))
    assert jobs.edit("job", {"command": "date"}).kind == JobKind.SCRIPT
    assert jobs.edit("job", {"command": None}).kind == JobKind.AGENT


def test_an_edit_that_changes_nothing_records_no_change(jobs: CronJobs, db: Database) -> None:
    jobs.add(JobSpec("poll", "every 1h", goal="poll"))
    jobs.edit("poll", {"goal": "poll"})
    [event] = events(db, "cron_edited")
    assert event["data"]["changes"] == {}


def test_a_disabled_job_stays_disabled(jobs: CronJobs) -> None:
    jobs.add(JobSpec("poll", "every 1h"))
    jobs.disable("poll")
    edited = jobs.edit("poll", {"schedule": "every 2h"})
    assert not edited.enabled and edited.next_fire_at is None
    assert jobs.enable("poll").next_fire_at == T0 + timedelta(hours=2)


def test_an_edit_moves_a_job_to_another_board(jobs: CronJobs, kb: Kanban) -> None:
    jobs.add(JobSpec("poll", "every 1h"))
    with pytest.raises(BoardNotFound):
        jobs.edit("poll", {"board": "ops"})
    kb.create_board("ops")
    assert jobs.edit("poll", {"board": "ops"}).board == "ops"


@pytest.mark.parametrize(("changes", "error", "message"), [
    ({"schedule": "every 0m"}, InvalidSchedule, "interval must be positive"),
    ({"name": "other"}, ValidationError, "cannot edit 'name' of a cron job"),
    ({"context_from": ("poll",)}, ValidationError, "cannot read its own results"),
    ({"overlap": "queue"}, ValidationError, "overlap must be 'skip', 'allow'"),
])
def test_a_bad_edit_changes_nothing(jobs: CronJobs, db: Database, changes: dict[str, object],
                                    error: type[Exception], message: str) -> None:
    added = jobs.add(JobSpec("poll", "every 1h"))
    with pytest.raises(error, match=message):
        jobs.edit("poll", changes)
    assert jobs.get("poll") == added
    assert events(db, "cron_edited") == []


def test_editing_an_unknown_job(jobs: CronJobs) -> None:
    with pytest.raises(CronJobNotFound):
        jobs.edit("nope", {"goal": "x"})
