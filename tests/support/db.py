"""Test databases: fresh migrated stores (SQLite files, PostgreSQL databases) and a fake clock."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlmodel import SQLModel

from kanban import transitions
from kanban.cards import NewCard
from kanban.claims import ClaimFilter
from kanban.records import CardRecord, Claim
from kanban.service import Kanban
from kanban.states import CardStatus, Outcome
from kanban.transitions import Actor
from state.db import open_database
from state.engine import Database
from state.models import Card, Event, Run
from state.paths import DbLocation

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
PG_CONNECT_TIMEOUT_S = 1
DEFAULT_BOARD = "default"

# Contract tests parametrize the `store` fixture over these.
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

card_t = Card.__table__
event_t = Event.__table__
run_t = Run.__table__


class FakeClock:
    """An aware UTC clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2025, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def open_sqlite(path: Path, *, synchronous: str = "NORMAL") -> Database:
    """A migrated kanban database in a (new) file, with the default board."""
    db = open_database(DbLocation(str(path), "flag"), create=True, synchronous=synchronous)
    Kanban(db).ensure_board(DEFAULT_BOARD)
    return db


def copy_sqlite(template: Path, path: Path) -> Database:
    """A fresh database copied from a migrated, closed template file."""
    shutil.copyfile(template, path)
    return open_database(DbLocation(str(path), "flag"))


def open_postgres(url: str) -> Database:
    """A migrated kanban database at `url`, with the default board."""
    db = open_database(DbLocation(url, "flag"))
    Kanban(db).ensure_board(DEFAULT_BOARD)
    return db


def reset_postgres(db: Database) -> None:
    """Empty every table but the migration record, restart ids, recreate the default board.

    DELETE on a few rows is much faster than TRUNCATE (new files) or CREATE DATABASE.
    """
    with db.write() as conn:
        for table in reversed(SQLModel.metadata.sorted_tables):
            if table.name != "schema_migration":
                conn.execute(table.delete())
        for sequence in conn.exec_driver_sql(
            "SELECT sequence_name FROM information_schema.sequences"
            " WHERE sequence_schema = current_schema()").scalars().all():
            conn.exec_driver_sql(f'ALTER SEQUENCE "{sequence}" RESTART')
    Kanban(db).ensure_board(DEFAULT_BOARD)


def _admin_connect() -> Any:
    import psycopg

    return psycopg.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres",
        connect_timeout=PG_CONNECT_TIMEOUT_S, autocommit=True,
    )


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A uniquely named, empty PostgreSQL database, dropped afterwards; skips with no server."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        pytest.skip("psycopg is not installed")
    try:
        admin = _admin_connect()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL server on {PG_HOST}:{PG_PORT}: {exc}".splitlines()[0])
    name = f"kanban_test_{uuid.uuid4().hex[:16]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Raw views of stored rows, for asserting what a call changed (or did not).

def card_row(db: Database, card_id: int) -> dict[str, Any]:
    with db.read() as conn:
        return dict(conn.execute(select(card_t).where(card_t.c.id == card_id)).mappings().one())


def event_count(db: Database) -> int:
    with db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(event_t)).scalar_one())


def events_of(db: Database, card_id: int) -> list[dict[str, Any]]:
    """A card's events, oldest first, with `data` decoded."""
    with db.read() as conn:
        rows = conn.execute(
            select(event_t).where(event_t.c.card_id == card_id).order_by(event_t.c.id)
        ).mappings()
        return [{**row, "data": json.loads(row["data"])} for row in rows]


def status_events(db: Database, card_id: int) -> list[dict[str, Any]]:
    """A card's events that moved it between states (those carrying from/to)."""
    return [e for e in events_of(db, card_id) if "from" in e["data"]]


def runs_of(db: Database, card_id: int) -> list[dict[str, Any]]:
    with db.read() as conn:
        rows = conn.execute(select(run_t).where(run_t.c.card_id == card_id).order_by(run_t.c.id))
        return [dict(r) for r in rows.mappings()]


def claim_token(db: Database, card_id: int) -> str | None:
    return card_row(db, card_id)["claim_token"]


# Board helpers: drive a card to a state the way the dispatcher and workers do.

DISPATCHER = Actor("dispatcher")
LEASE_S = 30.0


def worker(claim: Claim) -> Actor:
    """The actor a worker writes as: its card and its claim token."""
    return Actor(f"card:#{claim.card_id}", claim.claim_token)


def claim_one(kb: Kanban, card_id: int | None = None, **filters: Any) -> Claim:
    """Claim the next ready card (which must be `card_id` if given)."""
    claims = kb.claim(1, lease_s=LEASE_S, flt=ClaimFilter(**filters))
    assert len(claims) == 1, f"expected one claim, got {claims}"
    if card_id is not None:
        assert claims[0].card_id == card_id
    return claims[0]


def requeue(kb: Kanban, card_id: int, *, actor: Actor = DISPATCHER,
            outcome: Outcome = Outcome.CRASHED, delay_s: float | None = 0.0) -> CardRecord:
    """What the dispatcher does after a crash or an expired lease."""
    with kb.db.write() as conn:
        return transitions.requeue_or_fail(conn, card_id, outcome, "worker crashed",
                                           now=kb.clock(), actor=actor, delay_s=delay_s)


def fail(kb: Kanban, card_id: int, *, actor: Actor = DISPATCHER,
         error: str = "fatal: 401 unauthorised") -> CardRecord:
    with kb.db.write() as conn:
        return transitions.fail(conn, card_id, error, now=kb.clock(), actor=actor)


def put_card_in(kb: Kanban, status: CardStatus | str, **fields: Any) -> CardRecord:
    """A new card brought to `status` through the API (a todo card gets a ready dependency)."""
    status = CardStatus(status)
    if status is CardStatus.TODO:
        dep = kb.add_card(NewCard("dependency"))
        card = kb.add_card(NewCard("card under test", depends_on=[dep.id], **fields))
    else:
        card = kb.add_card(NewCard("card under test", **fields))
    if status is CardStatus.RUNNING:
        claim_one(kb, card.id)
    elif status is CardStatus.BLOCKED:
        kb.block(card.id, "needs a human")
    elif status is CardStatus.DONE:
        kb.complete(card.id, "finished by hand")
    elif status is CardStatus.FAILED:
        claim_one(kb, card.id)
        fail(kb, card.id)
    elif status is CardStatus.CANCELLED:
        kb.cancel(card.id, reason="not needed")
    card = kb.card(card.id)
    assert card.status == status
    return card
