"""Firing due cron jobs exactly once, from inside a dispatcher tick (no thread of its own).

Each due job is fired in its own write transaction: re-read the job, compare-and-set its
`next_fire_at` from the value seen to the next slot after now, and only if that changed the
row insert the card, its fire record, its deliveries and its `cron_fired` event. Several
dispatchers (or `kanban cron tick`, or `kanban cron run`) firing at once therefore make one
card per slot. Missed slots follow the job's catch-up policy. With overlap `skip` a job whose
previous card is unfinished advances without a card. A one-shot disables itself once fired.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from kanban.cards import NewCard, add, get_card
from kanban.cron import ledger, store
from kanban.cron.chain import chained_context
from kanban.cron.jobs import CatchUp, CronJobDisabled, CronJobRecord, Overlap, iso
from kanban.cron.schedule import (
    coalesce,
    due_slots,
    jitter_offset,
    latest_slot_since,
)
from kanban.events import record_event
from kanban.state.config import Profile
from kanban.state.errors import DatabaseError, KanbanError
from kanban.state.store import Conn, Database
from kanban.states import UNFINISHED

Profiles = Mapping[str, Profile]
NO_PROFILES: Profiles = {}

MISFIRE_GRACE = timedelta(seconds=60)  # `--catch-up skip`: a slot this late still fires
CATCH_UP_CAP = 50  # `--catch-up all`: cards made for missed slots in one go, at most


class FireOutcome(StrEnum):
    FIRED = "fired"  # a card was created
    SKIPPED = "skipped"  # overlap `skip` and the previous card is unfinished
    MISSED = "missed"  # catch-up `skip` (or a cap) dropped slots that passed unfired
    FAILED = "failed"  # the card could not be created; the slot was stepped past


@dataclass(frozen=True)
class FireResult:
    """What one fire of one job did."""

    job: str
    board: str
    outcome: FireOutcome
    card_id: int | None
    slots: int  # scheduled slots this fire covers (0 for a manual run between slots)
    scheduled_at: datetime | None  # the earliest slot covered (None for such a manual run)
    next_fire_at: datetime | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "board": self.board, "outcome": str(self.outcome),
            "card_id": self.card_id, "slots": self.slots,
            "scheduled_at": iso(self.scheduled_at), "next_fire_at": iso(self.next_fire_at),
            "reason": self.reason,
        }


def fire_due_jobs(db: Database, now: datetime, *, board: str | None = None,
                  profiles: Profiles = NO_PROFILES) -> list[FireResult]:
    """Fire every enabled job due at `now` (on one board, if given) that no one fired first.
    `profiles`: config.toml's, whose max_attempts and review gate an agent job's cards take
    unless it sets its own."""
    with db.read() as conn:
        due = store.due_jobs(conn, now, board=board)
    results: list[FireResult] = []
    for job_id, _ in due:
        results += _fire_due_job(db, job_id, now, profiles)
    return results


def fire_job_now(db: Database, name: str, now: datetime,
                 profiles: Profiles = NO_PROFILES) -> FireResult:
    """`kanban cron run`: a card now, whatever the overlap policy.

    The job must be enabled (a disabled job never fires). If a slot is due this run takes
    it (with the same compare-and-set a dispatcher uses), so a dispatcher firing at the same
    moment makes no second card; otherwise the schedule stays as it was.
    """
    with db.write() as conn:
        job = store.get_job(conn, name)
        if not job.enabled:
            raise CronJobDisabled(name)
        if job.next_fire_at is not None and job.next_fire_at <= now:
            slots, following = coalesce(job.parsed(now), job.next_fire_at, now,
                                        anchor=job.anchor_at)
            if store.advance(conn, job, following):
                return _make_card(conn, job, now, job.next_fire_at, slots, following,
                                  profiles, manual=True)
        return _make_card(conn, job, now, None, 0, job.next_fire_at, profiles, manual=True)


def _fire_due_job(db: Database, job_id: int, now: datetime,
                  profiles: Profiles) -> list[FireResult]:
    try:
        with db.write() as conn:
            return _fire(conn, job_id, now, profiles)
    except DatabaseError:
        raise
    except KanbanError as exc:
        # One broken job (its board gone, its stored schedule unreadable here) must not stop
        # every tick: step past the due slot and say why.
        with db.write() as conn:
            return _step_past(conn, job_id, now, exc.message)


def _is_due(job: CronJobRecord | None, now: datetime) -> bool:
    if job is None or not job.enabled or job.next_fire_at is None:
        return False
    return job.next_fire_at + jitter_offset(job.name, job.next_fire_at, job.jitter_s) <= now


def _fire(conn: Conn, job_id: int, now: datetime, profiles: Profiles) -> list[FireResult]:
    job = store.job_by_id(conn, job_id)
    if job is None or not _is_due(job, now):
        return []  # removed, disabled, fired by someone else, or its jitter not yet over
    assert job.next_fire_at is not None
    schedule = job.parsed(now)
    slots, following = coalesce(schedule, job.next_fire_at, now, anchor=job.anchor_at)
    if not store.advance(conn, job, following):
        return []
    busy = _unfinished_last_card(conn, job) if job.overlap == Overlap.SKIP else None
    if busy is not None:
        reason = f"card #{busy} from the previous fire is unfinished"
        return [_no_card(conn, job, now, FireOutcome.SKIPPED, slots, following, reason,
                         unfinished_card=busy)]
    if job.catch_up == CatchUp.ALL:
        slot_times = due_slots(schedule, job.next_fire_at, now, anchor=job.anchor_at,
                               limit=CATCH_UP_CAP)
        results = [_make_card(conn, job, now, at, 1, following, profiles) for at in slot_times]
        if slots > len(slot_times):
            results.append(_no_card(conn, job, now, FireOutcome.MISSED, slots - len(slot_times),
                                    following, f"more than {CATCH_UP_CAP} slots were missed"))
        return results
    if job.catch_up == CatchUp.SKIP:
        grace = MISFIRE_GRACE + timedelta(seconds=job.jitter_s)
        recent = latest_slot_since(schedule, now - grace, now, anchor=job.anchor_at)
        if recent is None or recent < job.next_fire_at:
            return [_no_card(conn, job, now, FireOutcome.MISSED, slots, following,
                             "every due slot is older than the catch-up grace")]
        results = []
        if slots > 1:
            results.append(_no_card(conn, job, now, FireOutcome.MISSED, slots - 1, following,
                                    "older slots passed while no dispatcher ran"))
        return [*results, _make_card(conn, job, now, recent, 1, following, profiles)]
    return [_make_card(conn, job, now, job.next_fire_at, slots, following, profiles)]


def _unfinished_last_card(conn: Conn, job: CronJobRecord) -> int | None:
    if job.last_card_id is None:
        return None
    card = get_card(conn, job.last_card_id)
    return card.id if card.status in UNFINISHED else None


def _make_card(conn: Conn, job: CronJobRecord, now: datetime, scheduled_at: datetime | None,
               slots: int, following: datetime | None, profiles: Profiles, *,
               manual: bool = False) -> FireResult:
    """The job's card, its fire record, its deliveries, its event, and the job's last card."""
    # A slot's card carries a key naming the slot: the same slot never adds a second card.
    key = None if manual or scheduled_at is None else (
        f"{job.creator}@{scheduled_at.isoformat()}")
    added = add(conn, NewCard(
        title=job.title, goal=job.goal, context=chained_context(conn, job), board=job.board,
        priority=job.priority, profile=job.profile, max_attempts=_attempts(job, profiles),
        timeout_s=job.card_timeout_s, created_by=job.creator, model=job.model,
        toolsets=",".join(job.toolsets) if job.toolsets is not None else None,
        command=job.command, key=key, skills=job.skills, workspace=job.workspace,
        review=_review(job, profiles)), now)
    if not added.created:
        return _no_card(conn, job, now, FireOutcome.SKIPPED, slots, following,
                        f"card #{added.card.id} already holds this slot")
    card = added.card
    store.record_fire(conn, job.id, card.id, now)
    fire_id = ledger.insert_fire(conn, ledger.Fire(
        job.id, job.name, job.board, str(FireOutcome.FIRED), manual, slots, scheduled_at, now,
        card_id=card.id))
    for target in job.deliver:
        ledger.insert_delivery(conn, fire_id=fire_id, job=job.name, card_id=card.id,
                               target=target, now=now)
    record_event(conn, board=job.board, kind="cron_fired", actor=job.creator, at=now,
                 card_id=card.id, job=job.name, job_kind=job.kind, fire_id=fire_id,
                 slots=slots, manual=manual, scheduled_at=scheduled_at, next_fire_at=following)
    return FireResult(job.name, job.board, FireOutcome.FIRED, card.id, slots, scheduled_at,
                      following)


def _attempts(job: CronJobRecord, profiles: Profiles) -> int:
    """The job's own max_attempts, else a script's default, else its profile's."""
    profile = profiles.get(job.profile)
    if job.max_attempts is not None or job.command is not None or profile is None:
        return job.card_max_attempts
    return profile.max_attempts


def _review(job: CronJobRecord, profiles: Profiles) -> str | None:
    """The job's own review gate, else an agent job's profile's (as `kanban add` takes it; a
    script's exit code is its own check)."""
    profile = profiles.get(job.profile)
    if job.review is not None or job.command is not None or profile is None:
        return job.review
    return profile.review


def _no_card(conn: Conn, job: CronJobRecord, now: datetime, outcome: FireOutcome, slots: int,
             following: datetime | None, reason: str, **data: Any) -> FireResult:
    """A slot passed without a card: recorded in the history and the event log."""
    ledger.insert_fire(conn, ledger.Fire(job.id, job.name, job.board, str(outcome), False,
                                         slots, job.next_fire_at, now, reason=reason))
    record_event(conn, board=job.board, kind=f"cron_{outcome}", actor=job.creator, at=now,
                 job=job.name, slots=slots, scheduled_at=job.next_fire_at,
                 next_fire_at=following, reason=reason, **data)
    return FireResult(job.name, job.board, outcome, None, slots, job.next_fire_at, following,
                      reason)


def _step_past(conn: Conn, job_id: int, now: datetime, error: str) -> list[FireResult]:
    job = store.job_by_id(conn, job_id)
    if job is None or not _is_due(job, now):
        return []
    try:
        slots, following = coalesce(job.parsed(now), job.next_fire_at,  # type: ignore[arg-type]
                                    now, anchor=job.anchor_at)
    except KanbanError:
        slots, following = 1, None  # the schedule itself is unreadable: disable the job
    if not store.advance(conn, job, following):
        return []
    return [_no_card(conn, job, now, FireOutcome.FAILED, slots, following, error, error=error)]
