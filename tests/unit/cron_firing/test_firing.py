"""fire_due_jobs over simulated time: once per slot, coalescing, overlap, one-shots, DST."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from kanban.cron import store
from kanban.cron.firing import FireOutcome, fire_due_jobs, fire_job_now
from kanban.cron.jobs import CronJobDisabled, CronJobNotFound, JobSpec
from kanban.cron.service import CronJobs
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import FakeClock, claim_one
from tests.unit.cron_firing.helpers import cards_of, created_at, events, job

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
BERLIN = ZoneInfo("Europe/Berlin")


def test_every_minute_for_an_hour_fires_sixty_times(jobs: CronJobs, db: Database) -> None:
    jobs.add(JobSpec("tick", "* * * * *", goal="tick", overlap="allow"))
    rng = random.Random(20250101)
    fired = []
    for minute in range(61):  # 12:00 .. 13:00 inclusive, plus random moments in between
        slot = T0 + minute * MINUTE
        moments = sorted(slot + timedelta(seconds=rng.uniform(0, 60)) for _ in range(3))
        for now in [slot, *moments] if minute < 60 else [slot]:
            fired += fire_due_jobs(db, now)
    assert len(fired) == 60
    assert [r.scheduled_at for r in fired] == [T0 + n * MINUTE for n in range(1, 61)]
    assert all(r.outcome is FireOutcome.FIRED and r.slots == 1 for r in fired)
    cards = cards_of(db, "tick")
    assert len(cards) == 60 and {c["title"] for c in cards} == {"tick"}
    assert [c["created_at"] for c in cards] == [T0 + n * MINUTE for n in range(1, 61)]
    assert len(events(db, "cron_fired")) == 60
    final = job(db, "tick")
    assert final.next_fire_at == T0 + 61 * MINUTE and final.last_card_id == cards[-1]["id"]


def test_a_fire_creates_the_jobs_card_and_event(jobs: CronJobs, kb: Kanban, db: Database,
                                                clock: FakeClock) -> None:
    kb.create_board("ops")
    jobs.add(JobSpec("report", "every 1h", goal="write the report", title="Hourly report",
                        board="ops", profile="writer"))
    assert fire_due_jobs(db, clock.advance(3599)) == []
    [result] = fire_due_jobs(db, clock.advance(1))
    card = kb.card(result.card_id)  # type: ignore[arg-type]
    assert (card.title, card.goal, card.board, card.profile) == (
        "Hourly report", "write the report", "ops", "writer")
    assert card.created_by == "cron:report" and card.status == "ready"
    assert result.to_json() == {
        "job": "report", "board": "ops", "outcome": "fired", "card_id": card.id, "slots": 1,
        "scheduled_at": "2025-01-01T13:00:00+00:00", "next_fire_at": "2025-01-01T14:00:00+00:00",
        "reason": None}
    [event] = events(db, "cron_fired")
    assert (event["card_id"], event["board"], event["actor"]) == (card.id, "ops", "cron:report")
    assert event["data"]["slots"] == 1 and event["data"]["manual"] is False
    stored = job(db, "report")
    assert stored.last_fire_at == clock() and stored.last_card_id == card.id


@pytest.mark.parametrize("spec", ["* * * * *", "every 1m"])
def test_downtime_across_ten_slots_fires_once(jobs: CronJobs, db: Database, spec: str) -> None:
    jobs.add(JobSpec("tick", spec))
    back = T0 + 10 * MINUTE + timedelta(seconds=30)  # 12:01 .. 12:10 were missed
    [result] = fire_due_jobs(db, back)
    assert result.slots == 10 and result.scheduled_at == T0 + MINUTE
    assert result.next_fire_at == T0 + 11 * MINUTE
    assert fire_due_jobs(db, back + timedelta(seconds=29)) == []
    assert len(cards_of(db, "tick")) == 1
    [event] = events(db, "cron_fired")
    assert event["data"]["slots"] == 10


def _utc(*args: int) -> str:
    return datetime(*args, tzinfo=UTC).isoformat(sep=" ")


@pytest.mark.parametrize(("start", "slots"), [
    # spring forward on 2025-03-30: 02:30 does not exist; it fires at 03:30 CEST (01:30 UTC)
    (datetime(2025, 3, 28, tzinfo=BERLIN),
     [_utc(2025, 3, 28, 1, 30), _utc(2025, 3, 29, 1, 30), _utc(2025, 3, 30, 1, 30),
      _utc(2025, 3, 31, 0, 30), _utc(2025, 4, 1, 0, 30)]),
    # fall back on 2025-10-26: 02:30 happens twice; it fires at the first (CEST) only
    (datetime(2025, 10, 24, tzinfo=BERLIN),
     [_utc(2025, 10, 24, 0, 30), _utc(2025, 10, 25, 0, 30), _utc(2025, 10, 26, 0, 30),
      _utc(2025, 10, 27, 1, 30), _utc(2025, 10, 28, 1, 30)]),
], ids=["spring", "autumn"])
def test_daylight_saving_changes_fire_once_a_day(db: Database, start: datetime,
                                                 slots: list[str]) -> None:
    CronJobs(db, clock=lambda: start).add(
        JobSpec("night", "30 2 * * *", timezone="Europe/Berlin", overlap="allow"))
    now, end = start, start + timedelta(days=len(slots))
    while now < end:  # a dispatcher ticking every 10 minutes
        now += timedelta(minutes=10)
        fire_due_jobs(db, now)
    assert [e["data"]["scheduled_at"] for e in events(db, "cron_fired")] == slots
    local_days = [at.astimezone(BERLIN).date() for at in created_at(db, "night")]
    assert len(local_days) == len(set(local_days)) == len(slots)


def test_the_spring_forward_slot_is_shifted_by_the_gap(db: Database) -> None:
    start = datetime(2025, 3, 29, 12, tzinfo=UTC)
    CronJobs(db, clock=lambda: start).add(
        JobSpec("night", "30 2 * * *", timezone="Europe/Berlin"))
    [saturday] = fire_due_jobs(db, datetime(2025, 3, 30, 1, 30, tzinfo=UTC))  # 03:30 CEST
    assert saturday.scheduled_at == datetime(2025, 3, 30, 1, 30, tzinfo=UTC)
    assert saturday.next_fire_at == datetime(2025, 3, 31, 0, 30, tzinfo=UTC)  # 02:30 CEST


def test_the_fall_back_repeat_does_not_fire_again(db: Database, kb: Kanban) -> None:
    start = datetime(2025, 10, 25, 12, tzinfo=UTC)
    CronJobs(db, clock=lambda: start).add(
        JobSpec("night", "30 2 * * *", timezone="Europe/Berlin", overlap="allow"))
    [first] = fire_due_jobs(db, datetime(2025, 10, 26, 0, 30, tzinfo=UTC))  # 02:30 CEST
    assert first.next_fire_at == datetime(2025, 10, 27, 1, 30, tzinfo=UTC)  # 02:30 CET, Monday
    assert fire_due_jobs(db, datetime(2025, 10, 26, 1, 31, tzinfo=UTC)) == []  # 02:31 CET


def test_overlap_skip_waits_for_the_previous_card(jobs: CronJobs, kb: Kanban, db: Database,
                                                  clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *"))
    [fired] = fire_due_jobs(db, clock.advance(60))
    claim_one(kb, fired.card_id)  # running: unfinished
    [skipped] = fire_due_jobs(db, clock.advance(60))
    assert skipped.outcome is FireOutcome.SKIPPED and skipped.card_id is None
    assert skipped.reason == f"card #{fired.card_id} from the previous fire is unfinished"
    assert skipped.next_fire_at == T0 + 3 * MINUTE == job(db, "tick").next_fire_at
    [event] = events(db, "cron_skipped")
    assert event["actor"] == "cron:tick" and event["data"]["unfinished_card"] == fired.card_id
    assert job(db, "tick").last_fire_at == T0 + MINUTE  # a skip is not a fire
    kb.complete(fired.card_id, "done")  # type: ignore[arg-type]
    [again] = fire_due_jobs(db, clock.advance(60))
    assert again.outcome is FireOutcome.FIRED and again.card_id != fired.card_id
    assert len(cards_of(db, "tick")) == 2


@pytest.mark.parametrize("finish", ["complete", "cancel"])
def test_overlap_skip_fires_after_any_finish(jobs: CronJobs, kb: Kanban, db: Database,
                                             clock: FakeClock, finish: str) -> None:
    jobs.add(JobSpec("tick", "* * * * *"))
    [fired] = fire_due_jobs(db, clock.advance(60))
    if finish == "complete":
        kb.complete(fired.card_id, "done")  # type: ignore[arg-type]
    else:
        kb.cancel(fired.card_id)  # type: ignore[arg-type]
    assert [r.outcome for r in fire_due_jobs(db, clock.advance(60))] == [FireOutcome.FIRED]


def test_overlap_allow_fires_while_the_previous_card_runs(jobs: CronJobs, kb: Kanban,
                                                          db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *", overlap="allow"))
    [first] = fire_due_jobs(db, clock.advance(60))
    claim_one(kb, first.card_id)
    [second] = fire_due_jobs(db, clock.advance(60))
    assert second.outcome is FireOutcome.FIRED
    assert [c["status"] for c in cards_of(db, "tick")] == ["running", "ready"]
    assert events(db, "cron_skipped") == []


@pytest.mark.parametrize(("spec", "zone", "due"), [
    ("in 30m", "UTC", T0 + timedelta(minutes=30)),
    ("2025-01-01T15:00", "Europe/Berlin", datetime(2025, 1, 1, 14, tzinfo=UTC)),
    ("2025-01-01T13:15:00Z", "UTC", datetime(2025, 1, 1, 13, 15, tzinfo=UTC)),
])
def test_a_one_shot_fires_once_then_disables_itself(jobs: CronJobs, db: Database, spec: str,
                                                    zone: str, due: datetime) -> None:
    jobs.add(JobSpec("once", spec, timezone=zone))
    assert fire_due_jobs(db, due - timedelta(seconds=1)) == []
    [result] = fire_due_jobs(db, due + timedelta(seconds=5))
    assert result.scheduled_at == due and result.slots == 1 and result.next_fire_at is None
    stored = job(db, "once")
    assert not stored.enabled and stored.next_fire_at is None
    for hours in range(1, 48):
        assert fire_due_jobs(db, due + timedelta(hours=hours)) == []
    assert len(cards_of(db, "once")) == 1


def test_fire_only_the_jobs_of_one_board(jobs: CronJobs, kb: Kanban, db: Database,
                                         clock: FakeClock) -> None:
    kb.create_board("ops")
    jobs.add(JobSpec("here", "* * * * *"))
    jobs.add(JobSpec("there", "* * * * *", board="ops"))
    now = clock.advance(60)
    assert [r.job for r in fire_due_jobs(db, now, board="ops")] == ["there"]
    assert [r.job for r in fire_due_jobs(db, now)] == ["here"]


def test_a_stale_compare_and_set_changes_nothing(jobs: CronJobs, db: Database,
                                                 clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *"))
    seen = job(db, "tick")
    fire_due_jobs(db, clock.advance(60))  # another dispatcher fired first
    with db.write() as conn:
        assert not store.advance(conn, seen, seen.next_fire_at + MINUTE)  # type: ignore[operator]
    assert job(db, "tick").next_fire_at == T0 + 2 * MINUTE


def test_run_fires_now_without_moving_the_schedule(jobs: CronJobs, kb: Kanban, db: Database,
                                                   clock: FakeClock) -> None:
    jobs.add(JobSpec("nightly", "0 2 * * *", goal="report"))
    result = fire_job_now(db, "nightly", clock.advance(5))
    assert result.outcome is FireOutcome.FIRED and result.slots == 0
    assert result.scheduled_at is None
    assert result.next_fire_at == job(db, "nightly").next_fire_at == datetime(
        2025, 1, 2, 2, tzinfo=UTC)
    assert kb.card(result.card_id).created_by == "cron:nightly"  # type: ignore[arg-type]
    assert job(db, "nightly").last_card_id == result.card_id
    [event] = events(db, "cron_fired")
    assert event["data"]["manual"] is True and event["data"]["slots"] == 0
    # a manual run ignores overlap: the first card is still unfinished
    assert fire_job_now(db, "nightly", clock()).card_id != result.card_id
    # ... but the scheduled fire respects it and waits for the manual card
    [scheduled] = fire_due_jobs(db, datetime(2025, 1, 2, 2, tzinfo=UTC))
    assert scheduled.outcome is FireOutcome.SKIPPED


def test_run_refuses_disabled_and_unknown_jobs(jobs: CronJobs, db: Database) -> None:
    jobs.add(JobSpec("nightly", "@daily"))
    jobs.disable("nightly")
    with pytest.raises(CronJobDisabled, match="cron job 'nightly' is disabled"):
        fire_job_now(db, "nightly", T0)
    with pytest.raises(CronJobNotFound):
        fire_job_now(db, "nope", T0)
    assert cards_of(db, "nightly") == []


def test_a_job_whose_card_cannot_be_made_steps_past_the_slot(jobs: CronJobs, db: Database,
                                                             clock: FakeClock) -> None:
    jobs.add(JobSpec("broken", "* * * * *"))
    jobs.add(JobSpec("fine", "* * * * *"))
    with db.write() as conn:  # a row no longer valid, as if written by hand
        conn.execute("UPDATE cron_job SET title = '' WHERE name = 'broken'")
    results = fire_due_jobs(db, clock.advance(60))
    assert [(r.job, r.outcome) for r in results] == [("broken", FireOutcome.FAILED),
                                                     ("fine", FireOutcome.FIRED)]
    assert results[0].reason == "title must not be empty"
    assert job(db, "broken").next_fire_at == T0 + 2 * MINUTE
    [event] = events(db, "cron_failed")
    assert event["data"]["error"] == "title must not be empty"
    assert cards_of(db, "broken") == []


def test_an_unreadable_schedule_disables_the_job(jobs: CronJobs, db: Database,
                                                 clock: FakeClock) -> None:
    jobs.add(JobSpec("broken", "* * * * *"))
    with db.write() as conn:
        conn.execute("UPDATE cron_job SET timezone = 'Nowhere' WHERE name = 'broken'")
    [result] = fire_due_jobs(db, clock.advance(60))
    assert result.outcome is FireOutcome.FAILED and result.reason == "unknown timezone 'Nowhere'"
    assert not job(db, "broken").enabled
    assert fire_due_jobs(db, clock.advance(60)) == []
