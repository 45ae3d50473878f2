"""Reading what firing wrote: a job's cards and the cron events."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kanban.cron.jobs import CronJobRecord
from kanban.cron.store import get_job
from kanban.state.rows import with_times
from kanban.state.store import Database


def job(db: Database, name: str) -> CronJobRecord:
    with db.read() as conn:
        return get_job(conn, name)


def cards_of(db: Database, name: str) -> list[dict[str, Any]]:
    """Every card the job created, oldest first."""
    with db.read() as conn:
        rows = conn.maps("SELECT * FROM card WHERE created_by = :by ORDER BY id",
                         {"by": f"cron:{name}"})
        return [with_times(r) for r in rows]


def created_at(db: Database, name: str) -> list[datetime]:
    return [card["created_at"] for card in cards_of(db, name)]


def events(db: Database, kind: str) -> list[dict[str, Any]]:
    """Events of one kind, oldest first, with `data` decoded."""
    with db.read() as conn:
        rows = conn.maps("SELECT * FROM event WHERE kind = :kind ORDER BY id", {"kind": kind})
        return [{**with_times(r), "data": json.loads(r["data"])} for r in rows]
