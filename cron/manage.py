"""Adding, editing, enabling and removing jobs (each in the caller's transaction, each with
its event), and the reads `cron list`, `cron show`, `cron history` and `kanban status` use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kanban.cards import require_board
from kanban.cron import ledger, store
from kanban.cron.checks import Environment, check_job
from kanban.cron.jobs import (
    CronJobExists,
    CronJobRecord,
    CronJobSpent,
    JobSpec,
    iso,
)
from kanban.cron.schedule import describe, first_fire, jitter_offset, next_fire_after, whole_second
from kanban.errors import ValidationError
from kanban.events import record_event
from kanban.state.store import Conn

# Changing these moves the job's next fire (recomputed from now).
TIMING = frozenset({"schedule", "timezone", "jitter_s"})
EDITABLE = frozenset(JobSpec.__dataclass_fields__) - {"name"}


def add_job(conn: Conn, spec: JobSpec, now: datetime, *, env: Environment | None = None,
            actor: str = "user") -> CronJobRecord:
    spec, schedule = spec.validated(now)
    require_board(conn, spec.board)
    if store.name_taken(conn, spec.name):
        raise CronJobExists(spec.name)
    _check_sources(conn, spec)
    if env is not None:
        check_job(conn, spec, env)
    next_fire_at = first_fire(schedule, now=now)
    store.insert_job(conn, spec, next_fire_at=next_fire_at, anchor=whole_second(now), now=now)
    record_event(conn, board=spec.board, kind="cron_added", actor=actor, at=now, job=spec.name,
                 job_kind=spec.kind, schedule=spec.schedule, timezone=spec.timezone,
                 next_fire_at=next_fire_at)
    return store.get_job(conn, spec.name)


def edit_job(conn: Conn, name: str, changes: Mapping[str, Any], now: datetime, *,
             env: Environment | None = None, actor: str = "user") -> CronJobRecord:
    """Change some settings; a new schedule, timezone or jitter recomputes the next fire."""
    unknown = sorted(set(changes) - EDITABLE)
    if unknown:
        raise ValidationError(f"cannot edit {unknown[0]!r} of a cron job")
    job = store.get_job(conn, name)
    before = job.spec()
    timing = any(key in TIMING and changes[key] != getattr(before, key) for key in changes)
    spec, schedule = replace(before, **changes).validated(now, reschedule=timing)
    if spec.board != job.board:
        require_board(conn, spec.board)
    _check_sources(conn, spec)
    if env is not None:
        check_job(conn, spec, env)
    diff = {key: [_plain(getattr(before, key)), _plain(getattr(spec, key))]
            for key in sorted(EDITABLE) if getattr(before, key) != getattr(spec, key)}
    next_fire_at, anchor = job.next_fire_at, job.anchor_at
    if timing:
        anchor = whole_second(now)
        next_fire_at = first_fire(schedule, now=now) if job.enabled else None
    store.update_job(conn, job.id, spec, next_fire_at=next_fire_at, anchor=anchor)
    record_event(conn, board=spec.board, kind="cron_edited", actor=actor, at=now, job=name,
                 changes=diff, next_fire_at=next_fire_at)
    return store.get_job(conn, name)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _check_sources(conn: Conn, spec: JobSpec) -> None:
    for source in spec.context_from:
        if not store.name_taken(conn, source):
            raise ValidationError(f"--context-from: no cron job named {source!r}")


def remove_job(conn: Conn, name: str, now: datetime, *, actor: str = "user") -> CronJobRecord:
    """Delete a job; its cards, history and deliveries stay."""
    job = store.get_job(conn, name)
    readers = store.readers_of(conn, name)
    if readers:
        raise ValidationError(f"cron job {name!r} feeds {', '.join(map(repr, readers))} "
                              "(--context-from); edit or remove that first")
    store.delete_job(conn, job.id)
    record_event(conn, board=job.board, kind="cron_removed", actor=actor, at=now, job=name)
    return job


def set_enabled(conn: Conn, name: str, enabled: bool, now: datetime, *,
                actor: str = "user") -> CronJobRecord:
    """Enable (next fire computed from now) or disable a job; a no-op if already so."""
    job = store.get_job(conn, name)
    if job.enabled == enabled:
        return job
    next_fire_at = None
    if enabled:
        schedule = job.parsed(now)
        next_fire_at = next_fire_after(schedule, now, anchor=job.anchor_at)
        if next_fire_at is None:
            assert schedule.fire_at is not None
            raise CronJobSpent(name, schedule.fire_at)
    store.set_next_fire(conn, job.id, next_fire_at)
    record_event(conn, board=job.board, kind="cron_enabled" if enabled else "cron_disabled",
                 actor=actor, at=now, job=name, next_fire_at=next_fire_at)
    return store.get_job(conn, name)


def redeliver(conn: Conn, name: str, now: datetime, *, actor: str = "user") -> list[int]:
    """Send a job's failed deliveries again (from their first attempt)."""
    job = store.get_job(conn, name)
    ids = ledger.requeue_failed(conn, name, now=now)
    if ids:
        record_event(conn, board=job.board, kind="cron_redeliver", actor=actor, at=now,
                     job=name, deliveries=ids)
    return ids


# -- reads ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CronJobDetail:
    """`kanban cron show`: the job, its schedule in words, upcoming fires, recent fires and
    the deliveries not yet delivered."""

    job: CronJobRecord
    description: str
    next_fires: list[datetime]
    fires: list[ledger.FireRecord]
    undelivered: list[ledger.DeliveryRecord]

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job.to_json(), "description": self.description,
                "next_fires": [t.isoformat() for t in self.next_fires],
                "fires": [f.to_json() for f in self.fires],
                "undelivered": [d.to_json() for d in self.undelivered]}


@dataclass(frozen=True)
class UpcomingFire:
    job: str
    board: str
    at: datetime
    timezone: str  # the job's, for showing `at` as its wall time

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "board": self.board, "at": iso(self.at),
                "timezone": self.timezone}


def list_jobs(conn: Conn, *, board: str | None = None) -> list[CronJobRecord]:
    if board is not None:
        require_board(conn, board)
    return store.list_jobs(conn, board=board)


def fire_times(job: CronJobRecord, now: datetime, limit: int) -> list[datetime]:
    """When the job's next `limit` fires happen (jitter included): its stored next fire
    (maybe overdue), then the slots after now."""
    if not job.enabled or job.next_fire_at is None or limit <= 0:
        return []
    schedule = job.parsed(now)
    slots = [job.next_fire_at]
    while len(slots) < limit:
        following = next_fire_after(schedule, max(slots[-1], now), anchor=job.anchor_at)
        if following is None:
            break
        slots.append(following)
    return [slot + jitter_offset(job.name, slot, job.jitter_s) for slot in slots]


def job_detail(conn: Conn, name: str, now: datetime, *, fires: int = 5,
               history: int = 10) -> CronJobDetail:
    job = store.get_job(conn, name)
    return CronJobDetail(job, describe(job.parsed(now)), fire_times(job, now, fires),
                         ledger.fires_of(conn, job.id, limit=history),
                         ledger.deliveries_of(conn, name, unsettled_only=True))


def history(conn: Conn, name: str, *, limit: int = 20) -> tuple[CronJobRecord,
                                                                 list[ledger.FireRecord]]:
    job = store.get_job(conn, name)
    return job, ledger.fires_of(conn, job.id, limit=limit)


def upcoming_fires(conn: Conn, now: datetime, limit: int, *,
                   board: str | None = None) -> list[UpcomingFire]:
    """The next `limit` fires over every enabled job, soonest first."""
    fires = [UpcomingFire(job.name, job.board, at, job.timezone)
             for job in list_jobs(conn, board=board) for at in fire_times(job, now, limit)]
    return sorted(fires, key=lambda f: (f.at, f.job))[:limit]

