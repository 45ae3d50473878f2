"""Every query over `cron_job`. Callers hold the transaction."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kanban.cron.jobs import CronJobNotFound, CronJobRecord, JobSpec
from kanban.state.rows import as_time, with_times
from kanban.state.store import Conn


def _columns(spec: JobSpec) -> dict[str, Any]:
    """The stored form of a validated spec's settings."""
    return {
        "schedule": spec.schedule, "timezone": spec.timezone, "kind": str(spec.kind),
        "title": spec.title, "goal": spec.goal, "command": spec.command,
        "context_from": ",".join(spec.context_from), "profile": spec.profile,
        "model": spec.model,
        "toolsets": ",".join(spec.toolsets) if spec.toolsets is not None else None,
        "timeout_s": spec.timeout_s, "max_attempts": spec.max_attempts,
        "workspace": spec.workspace, "priority": spec.priority,
        "deliver": json.dumps(list(spec.deliver)), "catch_up": str(spec.catch_up),
        "jitter_s": spec.jitter_s, "overlap": str(spec.overlap),
        "skills": ",".join(spec.skills) or None, "review": spec.review,
    }


def insert_job(conn: Conn, spec: JobSpec, *, next_fire_at: datetime, anchor: datetime,
               now: datetime) -> int:
    values = {**_columns(spec), "name": spec.name, "board": spec.board, "enabled": True,
              "next_fire_at": next_fire_at, "anchor_at": anchor, "created_at": now}
    names = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    return int(conn.scalar(f"INSERT INTO cron_job ({names}) VALUES ({marks}) RETURNING id",
                           values))


def update_job(conn: Conn, job_id: int, spec: JobSpec, *, next_fire_at: datetime | None,
               anchor: datetime) -> None:
    values = {**_columns(spec), "board": spec.board, "next_fire_at": next_fire_at,
              "enabled": next_fire_at is not None, "anchor_at": anchor}
    sets = ", ".join(f"{name} = :{name}" for name in values)
    conn.run(f"UPDATE cron_job SET {sets} WHERE id = :id", {**values, "id": job_id})


def delete_job(conn: Conn, job_id: int) -> None:
    conn.run("DELETE FROM cron_job WHERE id = :id", {"id": job_id})


def name_taken(conn: Conn, name: str) -> bool:
    return conn.one("SELECT id FROM cron_job WHERE name = :name", {"name": name}) is not None


def get_job(conn: Conn, name: str) -> CronJobRecord:
    row = conn.map("SELECT * FROM cron_job WHERE name = :name", {"name": name})
    if row is None:
        raise CronJobNotFound(name)
    return _job(row)


def job_by_id(conn: Conn, job_id: int) -> CronJobRecord | None:
    row = conn.map("SELECT * FROM cron_job WHERE id = :id", {"id": job_id})
    return _job(row) if row is not None else None


def _job(row: dict[str, Any]) -> CronJobRecord:
    return CronJobRecord.from_row(with_times(row))


def list_jobs(conn: Conn, *, board: str | None = None) -> list[CronJobRecord]:
    sql = "SELECT * FROM cron_job"
    if board is not None:
        sql += " WHERE board = :board"
    return [_job(r) for r in conn.maps(sql + " ORDER BY name", {"board": board})]


def readers_of(conn: Conn, name: str) -> list[str]:
    """The jobs whose cards read `name`'s latest result (`--context-from`)."""
    rows = conn.all("SELECT name, context_from FROM cron_job WHERE context_from <> '' "
                    "ORDER BY name")
    return [reader for reader, sources in rows if name in str(sources).split(",")]


def due_jobs(conn: Conn, now: datetime, *,
             board: str | None = None) -> list[tuple[int, datetime]]:
    """(id, next_fire_at) of the enabled jobs whose slot has come, earliest first
    (a job with jitter may still wait a little past its slot)."""
    sql = "SELECT id, next_fire_at FROM cron_job WHERE enabled AND next_fire_at <= :now"
    if board is not None:
        sql += " AND board = :board"
    rows = conn.all(sql + " ORDER BY next_fire_at, id", {"now": now, "board": board})
    return [(job_id, as_time(at)) for job_id, at in rows]  # type: ignore[misc]


def set_next_fire(conn: Conn, job_id: int, next_fire_at: datetime | None) -> None:
    """Enable (with a next fire) or disable (None) a job."""
    conn.run("UPDATE cron_job SET enabled = :enabled, next_fire_at = :next WHERE id = :id",
             {"enabled": next_fire_at is not None, "next": next_fire_at, "id": job_id})


def advance(conn: Conn, job: CronJobRecord, following: datetime | None) -> bool:
    """Move a due job to its next fire, only if no one else did (the compare-and-set)."""
    moved = conn.run(
        "UPDATE cron_job SET next_fire_at = :following, enabled = :enabled "
        "WHERE id = :id AND next_fire_at = :current",
        {"following": following, "enabled": following is not None, "id": job.id,
         "current": job.next_fire_at})
    return moved == 1


def record_fire(conn: Conn, job_id: int, card_id: int, now: datetime) -> None:
    conn.run("UPDATE cron_job SET last_fire_at = :now, last_card_id = :card WHERE id = :id",
             {"now": now, "card": card_id, "id": job_id})

