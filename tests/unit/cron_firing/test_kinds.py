"""Job kinds and per-job settings: what each fire's card carries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kanban.cron.firing import FireOutcome, fire_due_jobs, fire_job_now
from kanban.cron.jobs import JobKind, JobSpec
from kanban.cron.service import CronJobs
from kanban.errors import ValidationError
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import STORES, FakeClock, claim_one, fail
from tests.unit.cron_firing.helpers import cards_of, events, job

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_script_job_makes_a_card_with_its_command_and_no_model(
        jobs: CronJobs, kb: Kanban, db: Database, clock: FakeClock) -> None:
    added = jobs.add(JobSpec("backup", "every 1h", command="  tar czf /tmp/b.tgz .  "))
    assert added.kind == JobKind.SCRIPT and added.command == "tar czf /tmp/b.tgz ."
    [fired] = fire_due_jobs(db, clock.advance(3600))
    card = kb.card(fired.card_id)  # type: ignore[arg-type]
    assert card.command == "tar czf /tmp/b.tgz ." and card.model is None
    assert card.timeout_s == 180.0  # a script's default wall-clock limit
    assert card.max_attempts == 1  # a failing script fails its card
    assert card.created_by == "cron:backup" and card.title == "backup"
    [event] = events(db, "cron_fired")
    assert event["data"]["job_kind"] == "script"


def test_an_agent_job_card_takes_every_per_job_setting(jobs: CronJobs, kb: Kanban,
                                                       db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("report", "every 1h", goal="write it", profile="writer",
                     model="scripted:demo", toolsets=("kanban", " kanban", ""), timeout_s=900.0,
                     max_attempts=5, priority=7, workspace="worktree"))
    [fired] = fire_due_jobs(db, clock.advance(3600))
    card = kb.card(fired.card_id)  # type: ignore[arg-type]
    assert (card.profile, card.model, card.toolsets) == ("writer", "scripted:demo", "kanban")
    assert card.workspace == "worktree"
    assert (card.timeout_s, card.max_attempts, card.priority) == (900.0, 5, 7)
    assert card.command is None and card.goal == "write it"


def test_an_agent_job_without_settings_leaves_them_to_the_profile(
        jobs: CronJobs, kb: Kanban, db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("report", "every 1h", goal="write it"))
    [fired] = fire_due_jobs(db, clock.advance(3600))
    card = kb.card(fired.card_id)  # type: ignore[arg-type]
    assert (card.model, card.toolsets, card.timeout_s, card.max_attempts) == (None, None,
                                                                              None, 3)
    assert job(db, "report").kind == JobKind.AGENT


def _finish(kb: Kanban, card_id: int, result: str) -> None:
    kb.complete(card_id, result)  # by hand: as if its worker had finished it


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_chained_job_gets_the_latest_result_of_each_job_it_reads(
        jobs: CronJobs, kb: Kanban, db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("fetch", "every 1h", command="curl -s example.org", overlap="allow"))
    jobs.add(JobSpec("weather", "every 1h", command="echo sunny"))
    jobs.add(JobSpec("digest", "@daily", goal="summarise", context_from=("fetch", "weather")))
    assert job(db, "digest").kind == JobKind.CHAIN
    first, weather = fire_due_jobs(db, clock.advance(3600))
    _finish(kb, first.card_id, "old page")  # type: ignore[arg-type]
    second, _ = fire_due_jobs(db, clock.advance(3600))
    _finish(kb, second.card_id, "new page")  # type: ignore[arg-type]
    digest = fire_job_now(db, "digest", clock.advance(60))
    context = kb.card(digest.card_id).context  # type: ignore[arg-type]
    finished = kb.card(second.card_id).finished_at  # type: ignore[arg-type]
    assert f"## cron job fetch: latest result (card #{second.card_id}, finished " \
           f"{finished:%Y-%m-%d %H:%M:%S} UTC)\nnew page" in context
    assert "old page" not in context
    assert "## cron job weather\n(no result yet: none of its cards has finished)" in context
    assert context.index("cron job fetch") < context.index("cron job weather")
    assert weather.card_id is not None


def test_a_failed_card_is_not_a_result_to_chain(jobs: CronJobs, kb: Kanban, db: Database,
                                                clock: FakeClock) -> None:
    jobs.add(JobSpec("fetch", "every 1h", command="false", overlap="allow"))
    jobs.add(JobSpec("digest", "every 1h", goal="summarise", context_from=("fetch",)))
    fetch, digest = fire_due_jobs(db, clock.advance(3600))
    _finish(kb, fetch.card_id, "good")  # type: ignore[arg-type]
    _finish(kb, digest.card_id, "read")  # type: ignore[arg-type]
    later, _ = fire_due_jobs(db, clock.advance(3600))
    claim_one(kb, later.card_id)
    fail(kb, later.card_id)  # type: ignore[arg-type]
    run = fire_job_now(db, "digest", clock.advance(1))
    context = kb.card(run.card_id).context  # type: ignore[arg-type]
    assert f"(card #{fetch.card_id}," in context and "\ngood" in context


def test_a_chain_must_name_existing_other_jobs(jobs: CronJobs) -> None:
    with pytest.raises(ValidationError, match="--context-from: no cron job named 'nope'"):
        jobs.add(JobSpec("digest", "@daily", goal="g", context_from=("nope",)))
    with pytest.raises(ValidationError, match="cannot read its own results"):
        jobs.add(JobSpec("digest", "@daily", goal="g", context_from=("digest",)))


def test_a_job_that_feeds_another_cannot_be_removed(jobs: CronJobs) -> None:
    jobs.add(JobSpec("fetch", "@daily", command="true"))
    jobs.add(JobSpec("digest", "@daily", goal="g", context_from=("fetch",)))
    with pytest.raises(ValidationError, match="cron job 'fetch' feeds 'digest'"):
        jobs.remove("fetch")
    jobs.edit("digest", {"context_from": ()})
    jobs.remove("fetch")


@pytest.mark.parametrize(("spec", "message"), [
    (JobSpec("x", "@daily", timeout_s=0.5), "timeout must be between 1 and"),
    (JobSpec("x", "@daily", max_attempts=0), "max attempts must be between 1 and 100"),
    (JobSpec("x", "@daily", priority=10**9), "priority must be between"),
    (JobSpec("x", "@daily", command="  "), "script must not be empty"),
    (JobSpec("x", "@daily", workspace="parent"), "invalid workspace 'parent'"),
    (JobSpec("x", "@daily", workspace="dir:relative"), "invalid workspace 'dir:relative'"),
    (JobSpec("x", "@daily", catch_up="sometimes"), "catch-up must be 'skip', 'once', 'all'"),
    (JobSpec("x", "every 1m", jitter_s=60), "jitter of 60s is not shorter than the 60s"),
    (JobSpec("x", "@daily", jitter_s=7200), "jitter must be between 0 and 3600 seconds"),
    (JobSpec("x", "@daily", deliver=("sms:123",)), "unknown delivery target 'sms:123'"),
    (JobSpec("x", "@daily", deliver=("webhook:ftp://h/",)), "needs an http:// or https://"),
    (JobSpec("x", "@daily", deliver=("board:twelve",)), "board: takes a card id"),
    (JobSpec("x", "@daily", deliver=("cmd:'open",)), "cannot read the command"),
    (JobSpec("x", "@daily", deliver=("file:",)), "names nothing after 'file:'"),
])
def test_settings_out_of_shape_are_refused(jobs: CronJobs, spec: JobSpec, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        jobs.add(spec)
    assert jobs.jobs() == []


def test_run_takes_a_due_slot_so_the_dispatcher_does_not_fire_it_again(
        jobs: CronJobs, db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *", overlap="allow"))
    now = clock.advance(90)  # 12:01 is due and nobody fired it yet
    ran = fire_job_now(db, "tick", now)
    assert (ran.slots, ran.scheduled_at, ran.next_fire_at) == (1, T0 + MINUTE, T0 + 2 * MINUTE)
    assert fire_due_jobs(db, now) == []
    assert len(cards_of(db, "tick")) == 1
    [later] = fire_due_jobs(db, clock.advance(30))
    assert later.scheduled_at == T0 + 2 * MINUTE


def test_catch_up_once_makes_one_card_for_every_missed_slot(jobs: CronJobs, db: Database,
                                                           clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *", catch_up="once"))
    [result] = fire_due_jobs(db, clock.advance(10 * 60 + 30))
    assert (result.outcome, result.slots, result.scheduled_at) == (FireOutcome.FIRED, 10,
                                                                   T0 + MINUTE)


def test_catch_up_all_makes_a_card_for_each_missed_slot(jobs: CronJobs, db: Database,
                                                       clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *", catch_up="all", overlap="allow"))
    results = fire_due_jobs(db, clock.advance(5 * 60 + 30))
    assert [r.scheduled_at for r in results] == [T0 + n * MINUTE for n in range(1, 6)]
    assert all(r.slots == 1 and r.outcome is FireOutcome.FIRED for r in results)
    assert len(cards_of(db, "tick")) == 5
    assert job(db, "tick").next_fire_at == T0 + 6 * MINUTE


def test_catch_up_all_stops_at_its_cap_and_records_the_rest(jobs: CronJobs, db: Database,
                                                           clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *", catch_up="all", overlap="allow"))
    results = fire_due_jobs(db, clock.advance(80 * 60 + 30))
    assert len(cards_of(db, "tick")) == 50
    assert (results[-1].outcome, results[-1].slots) == (FireOutcome.MISSED, 30)
    [missed] = events(db, "cron_missed")
    assert missed["data"]["slots"] == 30


def test_catch_up_skip_fires_a_recent_slot_and_records_the_older_ones(
        jobs: CronJobs, db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("tick", "* * * * *", catch_up="skip"))
    missed, fired = fire_due_jobs(db, clock.advance(10 * 60 + 30))  # 12:10 is 30s old
    assert (missed.outcome, missed.slots, missed.card_id) == (FireOutcome.MISSED, 9, None)
    assert (fired.outcome, fired.slots, fired.scheduled_at) == (FireOutcome.FIRED, 1,
                                                                T0 + 10 * MINUTE)
    assert len(cards_of(db, "tick")) == 1


def test_catch_up_skip_drops_slots_that_are_all_too_old(jobs: CronJobs, db: Database,
                                                       clock: FakeClock) -> None:
    jobs.add(JobSpec("daily", "0 9 * * *", catch_up="skip"))  # next: 2025-01-02 09:00
    [result] = fire_due_jobs(db, datetime(2025, 1, 3, 12, tzinfo=UTC))
    assert (result.outcome, result.slots, result.card_id) == (FireOutcome.MISSED, 2, None)
    assert result.next_fire_at == datetime(2025, 1, 4, 9, tzinfo=UTC)
    assert cards_of(db, "daily") == []
    _, history = jobs.history("daily")
    assert [(f.outcome, f.slots) for f in history] == [("missed", 2)]


def test_jitter_delays_each_fire_the_same_way_in_every_dispatcher(
        jobs: CronJobs, db: Database, clock: FakeClock) -> None:
    from kanban.cron.schedule import jitter_offset

    jobs.add(JobSpec("poll", "every 1h", jitter_s=600, overlap="allow"))
    slot = T0 + timedelta(hours=1)
    offset = jitter_offset("poll", slot, 600)
    assert timedelta(0) < offset < timedelta(minutes=10)
    [first_at, second_at] = jobs.detail("poll", fires=2).next_fires
    assert first_at == slot + offset
    later = slot + timedelta(hours=1)
    assert second_at == later + jitter_offset("poll", later, 600)
    assert fire_due_jobs(db, first_at - timedelta(seconds=1)) == []
    [fired] = fire_due_jobs(db, first_at)
    assert fired.scheduled_at == slot  # the slot, not the jittered moment
    assert fired.next_fire_at == slot + timedelta(hours=1)
    assert jobs.detail("poll", fires=1).next_fires == [second_at]


def test_jittered_fire_times_spread_and_repeat() -> None:
    from kanban.cron.schedule import jitter_offset

    slots = [T0 + timedelta(hours=n) for n in range(200)]
    offsets = [jitter_offset("poll", s, 600).total_seconds() for s in slots]
    assert offsets == [jitter_offset("poll", s, 600).total_seconds() for s in slots]
    assert min(offsets) >= 0 and max(offsets) < 600 and len(set(offsets)) > 100
    others = [jitter_offset("other", s, 600).total_seconds() for s in slots]
    assert sum(a != b for a, b in zip(offsets, others, strict=True)) > 190
    assert jitter_offset("poll", slots[0], 0) == timedelta(0)
