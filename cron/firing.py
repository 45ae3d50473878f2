"""Firing due cron jobs exactly once, from inside a dispatcher tick (no thread of its own).

Each due job is fired in its own write transaction: re-read the job, compare-and-set its
`next_fire_at` from the value seen to the next slot after now, and only if that changed the
row insert the card and its `cron_fired` event. Several dispatchers (or processes) firing at
once therefore make one card per slot. Slots missed while no dispatcher ran coalesce into one
fire. With overlap `skip` a job whose previous card is unfinished advances without a card and
records `cron_skipped`. A one-shot disables itself once it has fired (or been skipped).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection

from cron.schedule import coalesce
from kanban import cron_jobs
from kanban.cards import NewCard, add_card
from kanban.cron_jobs import CronJobDisabled, CronJobRecord, Overlap
from kanban.events import record_event
from state.engine import Database
from state.errors import DatabaseError, KanbanError


class FireOutcome(StrEnum):
    FIRED = "fired"  # a card was created
    SKIPPED = "skipped"  # overlap `skip` and the previous card is unfinished
    FAILED = "failed"  # the card could not be created; the slot was stepped past


@dataclass(frozen=True)
class FireResult:
    """What one fire of one job did."""

    job: str
    board: str
    outcome: FireOutcome
    card_id: int | None
    slots: int  # scheduled slots this fire covers (0 for a manual run)
    scheduled_at: datetime | None  # the earliest slot covered (None for a manual run)
    next_fire_at: datetime | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "board": self.board, "outcome": str(self.outcome),
            "card_id": self.card_id, "slots": self.slots,
            "scheduled_at": self.scheduled_at.isoformat() if self.scheduled_at else None,
            "next_fire_at": self.next_fire_at.isoformat() if self.next_fire_at else None,
            "reason": self.reason,
        }


def fire_due_jobs(db: Database, now: datetime, *, board: str | None = None) -> list[FireResult]:
    """Fire every enabled job due at `now` (on one board, if given) that no one fired first."""
    with db.read() as conn:
        due = cron_jobs.due_jobs(conn, now, board=board)
    results = []
    for job_id, _ in due:
        result = _fire_due_job(db, job_id, now)
        if result is not None:
            results.append(result)
    return results


def fire_job_now(db: Database, name: str, now: datetime) -> FireResult:
    """`kanban cron run`: a card now, whatever the schedule and the overlap policy.

    The job must be enabled (a disabled job never fires). Its `next_fire_at` stays as it
    was; its last card becomes this one, so a scheduled fire with overlap `skip` waits for it.
    """
    with db.write() as conn:
        job = cron_jobs.get_job(conn, name)
        if not job.enabled:
            raise CronJobDisabled(name)
        card_id = _create_card(conn, job, now, slots=0, manual=True)
        return FireResult(job.name, job.board, FireOutcome.FIRED, card_id, 0, None,
                          job.next_fire_at)


def _fire_due_job(db: Database, job_id: int, now: datetime) -> FireResult | None:
    try:
        with db.write() as conn:
            return _fire(conn, job_id, now)
    except DatabaseError:
        raise
    except KanbanError as exc:
        # One broken job (its board gone, its stored schedule unreadable here) must not stop
        # every tick: step past the due slot and say why.
        with db.write() as conn:
            return _step_past(conn, job_id, now, exc.message)


def _fire(conn: Connection, job_id: int, now: datetime) -> FireResult | None:
    job = cron_jobs.job_by_id(conn, job_id)
    if job is None or not job.enabled or job.next_fire_at is None or job.next_fire_at > now:
        return None  # removed, disabled or fired by someone else since we looked
    slots, following = coalesce(job.parsed(now), job.next_fire_at, now, anchor=job.created_at)
    if not cron_jobs.advance(conn, job, following):
        return None
    busy = cron_jobs.unfinished_last_card(conn, job) if job.overlap == Overlap.SKIP else None
    if busy is not None:
        reason = f"card #{busy} from the previous fire is unfinished"
        record_event(conn, board=job.board, kind="cron_skipped", actor=job.creator, at=now,
                     job=job.name, slots=slots, scheduled_at=job.next_fire_at,
                     next_fire_at=following, unfinished_card=busy)
        return FireResult(job.name, job.board, FireOutcome.SKIPPED, None, slots,
                          job.next_fire_at, following, reason)
    card_id = _create_card(conn, job, now, slots=slots, following=following)
    return FireResult(job.name, job.board, FireOutcome.FIRED, card_id, slots, job.next_fire_at,
                      following)


def _create_card(conn: Connection, job: CronJobRecord, now: datetime, *, slots: int,
                 following: datetime | None = None, manual: bool = False) -> int:
    """The job's card, its `cron_fired` event, and the job's last fire and card."""
    card = add_card(conn, NewCard(title=job.title, goal=job.goal, board=job.board,
                                  profile=job.profile, created_by=job.creator), now)
    cron_jobs.record_fire(conn, job.id, card.id, now)
    record_event(conn, board=job.board, kind="cron_fired", actor=job.creator, at=now,
                 card_id=card.id, job=job.name, slots=slots, manual=manual,
                 scheduled_at=None if manual else job.next_fire_at,
                 next_fire_at=job.next_fire_at if manual else following)
    return card.id


def _step_past(conn: Connection, job_id: int, now: datetime, error: str) -> FireResult | None:
    job = cron_jobs.job_by_id(conn, job_id)
    if job is None or not job.enabled or job.next_fire_at is None or job.next_fire_at > now:
        return None
    try:
        slots, following = coalesce(job.parsed(now), job.next_fire_at, now,
                                    anchor=job.created_at)
    except KanbanError:
        slots, following = 1, None  # the schedule itself is unreadable: disable the job
    if not cron_jobs.advance(conn, job, following):
        return None
    record_event(conn, board=job.board, kind="cron_failed", actor=job.creator, at=now,
                 job=job.name, slots=slots, scheduled_at=job.next_fire_at,
                 next_fire_at=following, error=error)
    return FireResult(job.name, job.board, FireOutcome.FAILED, None, slots, job.next_fire_at,
                      following, error)
