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

from kanban import claims, transitions
from kanban.cards import NewCard
from kanban.children import Delegation, unfinished_children
from kanban.claims import ClaimFilter, claim_card
from kanban.records import CardRecord, Claim
from kanban.service import Kanban
from kanban.state.db import open_database
from kanban.state.paths import DbLocation
from kanban.state.rows import with_times
from kanban.state.store import Database
from kanban.states import CardStatus, Outcome
from kanban.transitions import Actor

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
# A server that is not there refuses at once on loopback; one that is there but busy (the
# suite's fleet tests start hundreds of backends) took over a second to let a test in,
# which then reported "no PostgreSQL server" (a failure under CI=true).
PG_CONNECT_TIMEOUT_S = 30
DEFAULT_BOARD = "default"

# Contract tests parametrize the `store` fixture over these.
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]



class FakeClock:
    """An aware UTC clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2025, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def open_sqlite(path: Path, *, synchronous: str = "NORMAL", journal: str = "auto"
                ) -> Database:
    """A migrated kanban database in a (new) file, with the default board."""
    db = open_database(DbLocation(str(path), "flag"), create=True, synchronous=synchronous,
                       journal=journal)
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
        tables = conn.column("SELECT table_name FROM information_schema.tables "
                             "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'")
        conn.execute("SET LOCAL session_replication_role = replica")  # no FK order needed
        for table in tables:
            if table != "schema_migration":
                conn.execute(f'DELETE FROM "{table}"')
        for sequence in conn.column("SELECT sequence_name FROM information_schema.sequences "
                                    "WHERE sequence_schema = current_schema()"):
            conn.execute(f'ALTER SEQUENCE "{sequence}" RESTART')
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
    from tests.support.pg import skip_or_fail

    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        skip_or_fail("psycopg is not installed")
    try:
        admin = _admin_connect()
    except psycopg.OperationalError as exc:
        skip_or_fail(f"no PostgreSQL server on {PG_HOST}:{PG_PORT}: {exc}".splitlines()[0])
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
        row = conn.map("SELECT * FROM card WHERE id = :id", {"id": card_id})
        assert row is not None, f"no card #{card_id}"
        return with_times(row)


def event_count(db: Database) -> int:
    with db.read() as conn:
        return int(conn.scalar("SELECT count(*) FROM event"))


def events_of(db: Database, card_id: int) -> list[dict[str, Any]]:
    """A card's events, oldest first, with `data` decoded."""
    with db.read() as conn:
        rows = conn.maps("SELECT * FROM event WHERE card_id = :id ORDER BY id", {"id": card_id})
        return [{**with_times(row), "data": json.loads(row["data"])} for row in rows]


def status_events(db: Database, card_id: int) -> list[dict[str, Any]]:
    """A card's events that moved it between states (those carrying from/to)."""
    return [e for e in events_of(db, card_id) if "from" in e["data"]]


def runs_of(db: Database, card_id: int) -> list[dict[str, Any]]:
    with db.read() as conn:
        rows = conn.maps("SELECT * FROM run WHERE card_id = :id ORDER BY id", {"id": card_id})
        return [with_times(r) for r in rows]


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


def hand_back(kb: Kanban, card_id: int, *, actor: Actor = DISPATCHER,
              delay_s: float = 0.0) -> CardRecord:
    """What a dispatcher does when it shuts down with the card's worker still running."""
    with kb.db.write() as conn:
        return transitions.hand_back(conn, card_id, "dispatcher shut down", now=kb.clock(),
                                     actor=actor, delay_s=delay_s)


def fail(kb: Kanban, card_id: int, *, actor: Actor = DISPATCHER,
         error: str = "fatal: 401 unauthorised") -> CardRecord:
    with kb.db.write() as conn:
        return transitions.fail(conn, card_id, error, now=kb.clock(), actor=actor)


def wait_on_children(kb: Kanban, card_id: int, *, actor: Actor = DISPATCHER) -> CardRecord:
    """The card's run delegated: it waits on its unfinished children."""
    with kb.db.write() as conn:
        kids = tuple(unfinished_children(conn, card_id))
        return transitions.wait(conn, card_id, Delegation(kids), now=kb.clock(), actor=actor)


def put_card_in(kb: Kanban, status: CardStatus | str, **fields: Any) -> CardRecord:
    """A new card brought to `status` through the API (a todo card gets a ready dependency)."""
    status = CardStatus(status)
    if status is CardStatus.SCHEDULED:
        card = kb.add_card(NewCard("card under test", run_at=kb.clock() + timedelta(minutes=30),
                                   **fields))
    elif status is CardStatus.TODO:
        dep = kb.add_card(NewCard("dependency"))
        card = kb.add_card(NewCard("card under test", depends_on=[dep.id], **fields))
    elif status is CardStatus.TRIAGE:
        card = kb.add_card(NewCard("card under test", triage=True, **fields))
    elif status is CardStatus.REVIEW:
        card = kb.add_card(NewCard("card under test", **{"review": "human", **fields}))
    else:
        card = kb.add_card(NewCard("card under test", **fields))
    if status is CardStatus.RUNNING:
        claim_one(kb, card.id)
    elif status is CardStatus.BLOCKED:
        kb.block(card.id, "needs a human")
    elif status is CardStatus.WAITING:  # claimed by id: other cards may be ready too
        with kb.db.write() as conn:
            claim = claim_card(conn, card.id, now=kb.clock(), lease_s=LEASE_S, host="test")
        kb.add_card(NewCard("child", parent_id=card.id))
        wait_on_children(kb, card.id, actor=worker(claim))
    elif status is CardStatus.DONE:
        kb.complete(card.id, "finished by hand")
    elif status is CardStatus.FAILED:
        claim_one(kb, card.id)
        fail(kb, card.id)
    elif status is CardStatus.CANCELLED:
        kb.cancel(card.id, reason="not needed")
    elif status is CardStatus.REVIEW:  # its worker completed it: the gate decides
        with kb.db.write() as conn:
            claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=LEASE_S)
        kb.complete(card.id, "finished, to be reviewed", actor=worker(claim), gated=True)
    card = kb.card(card.id)
    assert card.status == status
    return card
