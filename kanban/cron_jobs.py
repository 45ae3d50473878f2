"""Cron jobs on the board: their rows, validation, events and every query over `cron_job`.

Schedules are parsed and advanced by `cron.schedule`; `cron.firing` turns due jobs into cards
through the functions here. A job is enabled exactly when it has a `next_fire_at`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from sqlalchemy import Connection, delete, insert, select, update

from cron.schedule import Schedule, describe, first_fire, next_fire_after, parse_schedule
from kanban import validation as v
from kanban.cards import require_board
from kanban.errors import KanbanError, ValidationError
from kanban.events import record_event
from kanban.states import UNFINISHED
from state.engine import Database
from state.models import Card, CronJob, Run
from state.timeutil import utcnow

cron_t = CronJob.__table__
card_t = Card.__table__
run_t = Run.__table__

CREATOR_PREFIX = "cron:"


class Overlap(StrEnum):
    """What a due job does while the card of its previous fire is unfinished."""

    SKIP = "skip"
    ALLOW = "allow"


class CronJobNotFound(KanbanError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no cron job named {name!r} (see `kanban cron list`)")


class CronJobExists(KanbanError):
    def __init__(self, name: str) -> None:
        super().__init__(f"a cron job named {name!r} already exists")


class CronJobDisabled(KanbanError):
    def __init__(self, name: str) -> None:
        super().__init__(f"cron job {name!r} is disabled (`kanban cron enable {name}` first)")


class CronJobSpent(KanbanError):
    """A one-shot job whose time has passed: there is nothing left to schedule."""

    def __init__(self, name: str, fire_at: datetime) -> None:
        super().__init__(f"cron job {name!r} was a one-shot for {fire_at:%Y-%m-%d %H:%M:%S} UTC, "
                         "which has passed; add a new job instead")


def creator(name: str) -> str:
    """The `created_by` of a job's cards and the actor of its fires."""
    return f"{CREATOR_PREFIX}{name}"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@dataclass(frozen=True)
class CronJobRecord:
    id: int
    name: str
    board: str
    schedule: str
    timezone: str
    title: str
    goal: str
    profile: str
    enabled: bool
    overlap: str
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_card_id: int | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> CronJobRecord:
        values = {f.name: row[f.name] for f in fields(cls)}
        return cls(**{**values, "enabled": bool(values["enabled"])})

    @property
    def creator(self) -> str:
        return creator(self.name)

    def parsed(self, now: datetime) -> Schedule:
        """The stored schedule (a one-shot may already be past)."""
        return parse_schedule(self.schedule, self.timezone, now=now, allow_past=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "board": self.board, "schedule": self.schedule,
            "timezone": self.timezone, "title": self.title, "goal": self.goal,
            "profile": self.profile, "enabled": self.enabled, "overlap": self.overlap,
            "next_fire_at": _iso(self.next_fire_at), "last_fire_at": _iso(self.last_fire_at),
            "last_card_id": self.last_card_id, "created_at": _iso(self.created_at),
        }


@dataclass(frozen=True)
class NewCronJob:
    """What a caller supplies to add a job; `title` defaults to the name."""

    name: str
    schedule: str
    goal: str = ""
    title: str | None = None
    board: str = "default"
    profile: str = "default"
    timezone: str = "UTC"
    overlap: str = Overlap.SKIP

    def validated(self, now: datetime) -> tuple[NewCronJob, Schedule]:
        if not v.BOARD_NAME.match(self.name):
            raise ValidationError(f"invalid cron job name {self.name!r}: use 1-64 letters, "
                                  "digits, '.', '_' or '-'")
        title = v.title(self.title if self.title is not None else self.name)
        v.text(self.goal, "goal", v.MAX_GOAL)
        if not v.BOARD_NAME.match(self.profile):
            raise ValidationError(f"invalid profile name {self.profile!r}")
        if self.overlap not in set(Overlap):
            raise ValidationError(f"overlap must be 'skip' or 'allow', not {self.overlap!r}")
        schedule = parse_schedule(self.schedule, self.timezone, now=now)
        return NewCronJob(self.name, schedule.resolved_spec, self.goal, title, self.board,
                          self.profile, self.timezone, Overlap(self.overlap)), schedule


@dataclass(frozen=True)
class JobCard:
    """A card a job created, with how its last run ended."""

    id: int
    title: str
    status: str
    result: str | None
    error: str | None
    outcome: str | None
    created_at: datetime
    finished_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "status": self.status,
                "result": self.result, "error": self.error, "outcome": self.outcome,
                "created_at": _iso(self.created_at), "finished_at": _iso(self.finished_at)}


@dataclass(frozen=True)
class CronJobDetail:
    """`kanban cron show`: the job, its schedule in words, upcoming fires and its cards."""

    job: CronJobRecord
    description: str
    next_fires: list[datetime]
    cards: list[JobCard]

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job.to_json(), "description": self.description,
                "next_fires": [t.isoformat() for t in self.next_fires],
                "cards": [c.to_json() for c in self.cards]}


@dataclass(frozen=True)
class UpcomingFire:
    job: str
    board: str
    at: datetime
    timezone: str  # the job's, for showing `at` as its wall time

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "board": self.board, "at": self.at.isoformat(),
                "timezone": self.timezone}


# -- changes (each in the caller's transaction, each with its event) -------------------------


def add_job(conn: Connection, new: NewCronJob, now: datetime, *,
            actor: str = "user") -> CronJobRecord:
    new, schedule = new.validated(now)
    require_board(conn, new.board)
    if conn.execute(select(cron_t.c.id).where(cron_t.c.name == new.name)).first():
        raise CronJobExists(new.name)
    next_fire_at = first_fire(schedule, now=now)
    conn.execute(insert(cron_t), {
        "name": new.name, "board": new.board, "schedule": new.schedule,
        "timezone": new.timezone, "title": new.title, "goal": new.goal,
        "profile": new.profile, "enabled": True, "overlap": str(new.overlap),
        "next_fire_at": next_fire_at, "last_fire_at": None, "last_card_id": None,
        "created_at": now,
    })
    record_event(conn, board=new.board, kind="cron_added", actor=actor, at=now, job=new.name,
                 schedule=new.schedule, timezone=new.timezone, next_fire_at=next_fire_at)
    return get_job(conn, new.name)


def remove_job(conn: Connection, name: str, now: datetime, *,
               actor: str = "user") -> CronJobRecord:
    """Delete a job; the cards it created stay on the board."""
    job = get_job(conn, name)
    conn.execute(delete(cron_t).where(cron_t.c.id == job.id))
    record_event(conn, board=job.board, kind="cron_removed", actor=actor, at=now, job=name)
    return job


def set_enabled(conn: Connection, name: str, enabled: bool, now: datetime, *,
                actor: str = "user") -> CronJobRecord:
    """Enable (next fire computed from now) or disable a job; a no-op if already so."""
    job = get_job(conn, name)
    if job.enabled == enabled:
        return job
    next_fire_at = None
    if enabled:
        schedule = job.parsed(now)
        next_fire_at = next_fire_after(schedule, now, anchor=job.created_at)
        if next_fire_at is None:
            assert schedule.fire_at is not None
            raise CronJobSpent(name, schedule.fire_at)
    conn.execute(update(cron_t).where(cron_t.c.id == job.id)
                 .values(enabled=enabled, next_fire_at=next_fire_at))
    record_event(conn, board=job.board, kind="cron_enabled" if enabled else "cron_disabled",
                 actor=actor, at=now, job=name, next_fire_at=next_fire_at)
    return get_job(conn, name)


def advance(conn: Connection, job: CronJobRecord, following: datetime | None) -> bool:
    """Move a due job to its next fire, only if no one else did (the compare-and-set)."""
    moved = conn.execute(
        update(cron_t)
        .where(cron_t.c.id == job.id, cron_t.c.next_fire_at == job.next_fire_at)
        .values(next_fire_at=following, enabled=following is not None)
    )
    return moved.rowcount == 1


def record_fire(conn: Connection, job_id: int, card_id: int, now: datetime) -> None:
    conn.execute(update(cron_t).where(cron_t.c.id == job_id)
                 .values(last_fire_at=now, last_card_id=card_id))


# -- reads ------------------------------------------------------------------------------------


def get_job(conn: Connection, name: str) -> CronJobRecord:
    row = conn.execute(select(cron_t).where(cron_t.c.name == name)).mappings().first()
    if row is None:
        raise CronJobNotFound(name)
    return CronJobRecord.from_row(row)


def job_by_id(conn: Connection, job_id: int) -> CronJobRecord | None:
    row = conn.execute(select(cron_t).where(cron_t.c.id == job_id)).mappings().first()
    return CronJobRecord.from_row(row) if row is not None else None


def list_jobs(conn: Connection, *, board: str | None = None) -> list[CronJobRecord]:
    query = select(cron_t).order_by(cron_t.c.name)
    if board is not None:
        require_board(conn, board)
        query = query.where(cron_t.c.board == board)
    return [CronJobRecord.from_row(r) for r in conn.execute(query).mappings()]


def due_jobs(conn: Connection, now: datetime, *,
             board: str | None = None) -> list[tuple[int, datetime]]:
    """(id, next_fire_at) of the enabled jobs due at `now`, earliest first."""
    query = (select(cron_t.c.id, cron_t.c.next_fire_at)
             .where(cron_t.c.enabled.is_(True), cron_t.c.next_fire_at <= now)
             .order_by(cron_t.c.next_fire_at, cron_t.c.id))
    if board is not None:
        query = query.where(cron_t.c.board == board)
    return [(job_id, at) for job_id, at in conn.execute(query).all()]


def unfinished_last_card(conn: Connection, job: CronJobRecord) -> int | None:
    """The id of the job's previous card if that card is not finished yet."""
    if job.last_card_id is None:
        return None
    status = conn.execute(
        select(card_t.c.status).where(card_t.c.id == job.last_card_id)).scalar()
    return job.last_card_id if status in UNFINISHED else None


def job_cards(conn: Connection, name: str, *, limit: int = 20) -> list[JobCard]:
    """The newest cards created by jobs of this name, newest first."""
    last_outcome = (select(run_t.c.outcome).where(run_t.c.card_id == card_t.c.id)
                    .order_by(run_t.c.id.desc()).limit(1).scalar_subquery())
    rows = conn.execute(
        select(card_t.c.id, card_t.c.title, card_t.c.status, card_t.c.result, card_t.c.error,
               last_outcome.label("outcome"), card_t.c.created_at, card_t.c.finished_at)
        .where(card_t.c.created_by == creator(name))
        .order_by(card_t.c.id.desc()).limit(limit)
    ).all()
    return [JobCard(*row) for row in rows]


def fire_times(job: CronJobRecord, now: datetime, limit: int) -> list[datetime]:
    """The job's next `limit` fires: its stored next fire (maybe overdue), then after now."""
    if not job.enabled or job.next_fire_at is None or limit <= 0:
        return []
    schedule = job.parsed(now)
    times = [job.next_fire_at]
    while len(times) < limit:
        following = next_fire_after(schedule, max(times[-1], now), anchor=job.created_at)
        if following is None:
            break
        times.append(following)
    return times


def job_detail(conn: Connection, name: str, now: datetime, *, fires: int = 5,
               cards: int = 20) -> CronJobDetail:
    job = get_job(conn, name)
    return CronJobDetail(job, describe(job.parsed(now)), fire_times(job, now, fires),
                         job_cards(conn, name, limit=cards))


def upcoming_fires(conn: Connection, now: datetime, limit: int, *,
                   board: str | None = None) -> list[UpcomingFire]:
    """The next `limit` fires over every enabled job, soonest first."""
    fires = [UpcomingFire(job.name, job.board, at, job.timezone)
             for job in list_jobs(conn, board=board) for at in fire_times(job, now, limit)]
    return sorted(fires, key=lambda f: (f.at, f.job))[:limit]


class _HasDatabase(Protocol):
    db: Database


def next_fires(source: Database | _HasDatabase, now: datetime, limit: int = 5, *,
               board: str | None = None) -> list[UpcomingFire]:
    """Upcoming fires for `kanban status`; `source` is a Database or a `Kanban`."""
    db = source if isinstance(source, Database) else source.db
    with db.read() as conn:
        return upcoming_fires(conn, now, limit, board=board)


# -- the facade: one method, one transaction ---------------------------------------------------


class CronJobs:
    """Cron jobs over one database (firing is `cron.firing`)."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    def add(self, new: NewCronJob) -> CronJobRecord:
        with self.db.write() as conn:
            return add_job(conn, new, self.clock())

    def remove(self, name: str) -> CronJobRecord:
        with self.db.write() as conn:
            return remove_job(conn, name, self.clock())

    def enable(self, name: str) -> CronJobRecord:
        with self.db.write() as conn:
            return set_enabled(conn, name, True, self.clock())

    def disable(self, name: str) -> CronJobRecord:
        with self.db.write() as conn:
            return set_enabled(conn, name, False, self.clock())

    def get(self, name: str) -> CronJobRecord:
        with self.db.read() as conn:
            return get_job(conn, name)

    def jobs(self, *, board: str | None = None) -> list[CronJobRecord]:
        with self.db.read() as conn:
            return list_jobs(conn, board=board)

    def cards(self, name: str, *, limit: int = 20) -> list[JobCard]:
        with self.db.read() as conn:
            return job_cards(conn, name, limit=limit)

    def detail(self, name: str, *, fires: int = 5, cards: int = 20) -> CronJobDetail:
        with self.db.read() as conn:
            return job_detail(conn, name, self.clock(), fires=fires, cards=cards)

    def upcoming(self, limit: int = 5, *, board: str | None = None) -> list[UpcomingFire]:
        with self.db.read() as conn:
            return upcoming_fires(conn, self.clock(), limit, board=board)
