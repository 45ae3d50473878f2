"""Reading what firing wrote: a job's cards and the cron events."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select

from kanban.cron_jobs import CronJobRecord, get_job
from state.engine import Database
from state.models import Card, Event

card_t = Card.__table__
event_t = Event.__table__


def job(db: Database, name: str) -> CronJobRecord:
    with db.read() as conn:
        return get_job(conn, name)


def cards_of(db: Database, name: str) -> list[dict[str, Any]]:
    """Every card the job created, oldest first."""
    with db.read() as conn:
        rows = conn.execute(select(card_t).where(card_t.c.created_by == f"cron:{name}")
                            .order_by(card_t.c.id)).mappings()
        return [dict(r) for r in rows]


def created_at(db: Database, name: str) -> list[datetime]:
    return [card["created_at"] for card in cards_of(db, name)]


def events(db: Database, kind: str) -> list[dict[str, Any]]:
    """Events of one kind, oldest first, with `data` decoded."""
    with db.read() as conn:
        rows = conn.execute(select(event_t).where(event_t.c.kind == kind)
                            .order_by(event_t.c.id)).mappings()
        return [{**r, "data": json.loads(r["data"])} for r in rows]
