"""Adding, reading, enabling, disabling and removing cron jobs; each change leaves an event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kanban.cron.firing import fire_due_jobs
from kanban.cron.jobs import CronJobExists, CronJobNotFound, CronJobSpent, JobSpec, Overlap
from kanban.cron.schedule import InvalidSchedule
from kanban.cron.service import CronJobs, next_fires
from kanban.errors import BoardNotFound, KanbanError, ValidationError
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import FakeClock, claim_one
from tests.unit.cron_firing.helpers import cards_of, events

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def test_add_stores_the_job_with_its_first_fire(jobs: CronJobs, db: Database) -> None:
    added = jobs.add(JobSpec("nightly", "0 2 * * *", goal="summarise the day"))
    assert added.name == "nightly" and added.title == "nightly"  # the title defaults to the name
    assert (added.board, added.profile, added.timezone) == ("default", "default", "UTC")
    assert added.overlap == Overlap.SKIP and added.enabled
    assert added.next_fire_at == datetime(2025, 1, 2, 2, 0, tzinfo=UTC)
    assert added.last_fire_at is None and added.last_card_id is None
    assert added.created_at == T0
    assert jobs.get("nightly") == added
    [event] = events(db, "cron_added")
    assert event["board"] == "default" and event["actor"] == "user"
    assert event["data"]["job"] == "nightly" and event["data"]["schedule"] == "0 2 * * *"


def test_add_takes_title_profile_board_zone_and_overlap(jobs: CronJobs, kb: Kanban) -> None:
    kb.create_board("ops")
    added = jobs.add(JobSpec("standup", "0 9 * * mon-fri", goal="agenda", title="Stand-up",
                                board="ops", profile="writer", timezone="Europe/Berlin",
                                overlap="allow"))
    assert (added.title, added.board, added.profile) == ("Stand-up", "ops", "writer")
    assert added.timezone == "Europe/Berlin" and added.overlap == Overlap.ALLOW
    # 2025-01-01 is a Wednesday; 09:00 in Berlin is 08:00 UTC in winter
    assert added.next_fire_at == datetime(2025, 1, 2, 8, 0, tzinfo=UTC)


def test_a_relative_one_shot_is_stored_as_its_instant(jobs: CronJobs, clock: FakeClock) -> None:
    added = jobs.add(JobSpec("later", "in 30m", goal="check"))
    assert added.next_fire_at == T0 + timedelta(minutes=30)
    assert added.schedule == (T0 + timedelta(minutes=30)).isoformat()
    clock.advance(3600)  # re-reading it later still means the same instant
    assert jobs.detail("later").next_fires == [T0 + timedelta(minutes=30)]


def test_an_interval_fires_on_the_grid_of_its_creation(jobs: CronJobs) -> None:
    added = jobs.add(JobSpec("poll", "every 2h", goal="poll"))
    assert added.next_fire_at == T0 + timedelta(hours=2)
    assert jobs.detail("poll").next_fires == [T0 + timedelta(hours=2 * n) for n in range(1, 6)]


@pytest.mark.parametrize(("new", "error", "message"), [
    (JobSpec("bad name", "@daily"), ValidationError, "invalid cron job name 'bad name'"),
    (JobSpec("", "@daily"), ValidationError, "invalid cron job name ''"),
    (JobSpec("x", "@daily", board="nowhere"), BoardNotFound, "no board named 'nowhere'"),
    (JobSpec("x", "@daily", profile="no profile"), ValidationError, "invalid profile name"),
    (JobSpec("x", "@daily", overlap="queue"), ValidationError, "overlap must be"),
    (JobSpec("x", "@daily", title="two\nlines"), ValidationError, "title must be one line"),
    (JobSpec("x", "61 * * * *"), InvalidSchedule, "minute: the last value \\(61\\)"),
    (JobSpec("x", "every 0m"), InvalidSchedule, "interval must be positive"),
    (JobSpec("x", "2024-01-01T00:00"), InvalidSchedule, "is in the past"),
    (JobSpec("x", "@daily", timezone="Mars/Olympus"), InvalidSchedule, "unknown timezone"),
])
def test_invalid_jobs_are_refused_and_nothing_is_written(
    jobs: CronJobs, db: Database, new: JobSpec, error: type[KanbanError], message: str,
) -> None:
    with pytest.raises(error, match=message):
        jobs.add(new)
    assert jobs.jobs() == []
    assert events(db, "cron_added") == []


def test_names_are_unique(jobs: CronJobs) -> None:
    jobs.add(JobSpec("nightly", "@daily"))
    with pytest.raises(CronJobExists, match="a cron job named 'nightly' already exists"):
        jobs.add(JobSpec("nightly", "@hourly"))


@pytest.mark.parametrize("call", ["get", "remove", "enable", "disable", "detail"])
def test_an_unknown_job_is_one_clear_error(jobs: CronJobs, call: str) -> None:
    with pytest.raises(CronJobNotFound) as caught:
        getattr(jobs, call)("nope")
    assert str(caught.value).startswith("no cron job named 'nope'")


def test_list_is_by_name_and_filters_by_board(jobs: CronJobs, kb: Kanban) -> None:
    kb.create_board("ops")
    jobs.add(JobSpec("zeta", "@daily"))
    jobs.add(JobSpec("alpha", "@daily", board="ops"))
    assert [j.name for j in jobs.jobs()] == ["alpha", "zeta"]
    assert [j.name for j in jobs.jobs(board="ops")] == ["alpha"]
    with pytest.raises(BoardNotFound):
        jobs.jobs(board="nowhere")


def test_remove_keeps_the_cards(jobs: CronJobs, db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *"))
    fire_due_jobs(db, clock.advance(60))
    removed = jobs.remove("tick")
    assert removed.name == "tick" and jobs.jobs() == []
    assert len(cards_of(db, "tick")) == 1
    assert [e["data"]["job"] for e in events(db, "cron_removed")] == ["tick"]


def test_a_disabled_job_never_fires(jobs: CronJobs, db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *"))
    disabled = jobs.disable("tick")
    assert not disabled.enabled and disabled.next_fire_at is None
    for _ in range(5):
        assert fire_due_jobs(db, clock.advance(60)) == []
    assert cards_of(db, "tick") == []
    assert jobs.detail("tick").next_fires == []
    assert [e["data"]["job"] for e in events(db, "cron_disabled")] == ["tick"]


def test_enable_computes_the_next_fire_from_now(jobs: CronJobs, db: Database,
                                                clock: FakeClock) -> None:
    jobs.add(JobSpec("poll", "every 1h"))  # fires at 13:00, 14:00, ...
    jobs.disable("poll")
    clock.advance(5 * 3600 + 600)  # 17:10: the missed fires are dropped, not coalesced
    enabled = jobs.enable("poll")
    assert enabled.enabled and enabled.next_fire_at == datetime(2025, 1, 1, 18, tzinfo=UTC)
    assert fire_due_jobs(db, clock()) == []
    [event] = events(db, "cron_enabled")
    assert event["data"]["next_fire_at"].startswith("2025-01-01 18:00")


def test_enable_and_disable_twice_change_nothing(jobs: CronJobs, db: Database) -> None:
    jobs.add(JobSpec("poll", "every 1h"))
    assert jobs.enable("poll") == jobs.get("poll")
    jobs.disable("poll")
    jobs.disable("poll")
    assert len(events(db, "cron_disabled")) == 1 and events(db, "cron_enabled") == []


def test_a_spent_one_shot_cannot_be_enabled(jobs: CronJobs, db: Database,
                                            clock: FakeClock) -> None:
    jobs.add(JobSpec("once", "in 10m"))
    fire_due_jobs(db, clock.advance(600))
    assert not jobs.get("once").enabled
    with pytest.raises(CronJobSpent, match="one-shot for 2025-01-01 12:10:00 UTC"):
        jobs.enable("once")


def test_history_comes_newest_first_with_each_cards_state(jobs: CronJobs, kb: Kanban,
                                                          db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *", goal="do it", overlap="allow"))
    fire_due_jobs(db, clock.advance(60))
    fire_due_jobs(db, clock.advance(60))
    first, second = (c["id"] for c in cards_of(db, "tick"))
    claim_one(kb, first)
    clock.advance(42)
    kb.complete(first, "all good")
    job, fires = jobs.history("tick")
    assert job.name == "tick" and [f.card_id for f in fires] == [second, first]
    assert (fires[1].card_status, fires[1].result, fires[1].duration_s) == ("done", "all good",
                                                                           42.0)
    assert (fires[0].card_status, fires[0].duration_s) == ("ready", None)
    assert fires[1].scheduled_at == T0 + timedelta(minutes=1) and not fires[1].manual
    detail = jobs.detail("tick")
    assert detail.fires == fires and detail.description == "cron * * * * * (UTC)"


def test_next_fires_merges_every_enabled_job(jobs: CronJobs, kb: Kanban, db: Database) -> None:
    kb.create_board("ops")
    jobs.add(JobSpec("half", "every 30m"))
    jobs.add(JobSpec("hourly", "@hourly", board="ops"))
    jobs.add(JobSpec("off", "* * * * *"))
    jobs.disable("off")
    upcoming = next_fires(kb, T0, 4)
    assert [(f.job, f.at.strftime("%H:%M")) for f in upcoming] == [
        ("half", "12:30"), ("half", "13:00"), ("hourly", "13:00"), ("half", "13:30")]
    assert next_fires(db, T0, 2, board="ops")[0].to_json() == {
        "job": "hourly", "board": "ops", "at": "2025-01-01T13:00:00+00:00", "timezone": "UTC"}
    assert jobs.upcoming(1)[0].job == "half"


def test_an_overdue_job_lists_its_stored_fire_first(jobs: CronJobs, clock: FakeClock) -> None:
    jobs.add(JobSpec("poll", "every 1h"))
    clock.advance(3 * 3600 + 60)  # no dispatcher ran: 13:00 is overdue
    assert [t.strftime("%H:%M") for t in jobs.detail("poll", fires=3).next_fires] == [
        "13:00", "16:00", "17:00"]
