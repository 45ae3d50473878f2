"""Cron cards carry their job's skills and a key naming their slot."""

from __future__ import annotations

from kanban.cron.firing import FireOutcome, fire_due_jobs, fire_job_now
from kanban.cron.jobs import JobSpec
from kanban.cron.service import CronJobs
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import FakeClock


def test_a_fired_card_has_the_jobs_skills_and_its_slot_key(jobs: CronJobs, kb: Kanban,
                                                          db: Database, clock: FakeClock) -> None:
    jobs.add(JobSpec("report", "every 1h", goal="write", skills=("release-notes", "tone")))
    assert jobs.get("report").skills == ("release-notes", "tone")
    assert jobs.get("report").to_json()["skills"] == ["release-notes", "tone"]
    [result] = fire_due_jobs(db, clock.advance(3600))
    card = kb.card(result.card_id)  # type: ignore[arg-type]
    assert card.skill_names == ("release-notes", "tone")
    assert card.key == "cron:report@2025-01-01T13:00:00+00:00"
    manual = fire_job_now(db, "report", clock())
    assert kb.card(manual.card_id).key is None  # type: ignore[arg-type]


def test_a_slot_fired_again_adds_no_second_card(jobs: CronJobs, kb: Kanban, db: Database,
                                                clock: FakeClock) -> None:
    """Were a slot ever fired twice (a restored backup, a second firing path), its key
    keeps the first card and the second fire is recorded as skipped."""
    jobs.add(JobSpec("report", "every 1h", goal="write", overlap="allow"))
    [first] = fire_due_jobs(db, clock.advance(3600))
    with db.write() as conn:  # rewind the job to the slot it just fired
        conn.execute("UPDATE cron_job SET next_fire_at = :at", {"at": first.scheduled_at})
    [again] = fire_due_jobs(db, clock())
    assert again.outcome is FireOutcome.SKIPPED and again.card_id is None
    assert f"card #{first.card_id} already holds this slot" in (again.reason or "")
    assert len(kb.list_cards()) == 1
