"""The PostgreSQL side of idempotent adds: the insert that loses the race."""

from __future__ import annotations

import threading

import pytest

from kanban import cards
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.procs import wait_until


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_postgres_insert_that_loses_the_race_returns_the_winner(kb: Kanban, db: Database
                                                                ) -> None:
    """The loser's SELECT saw nothing; its INSERT waits on the winner's index entry, then
    inserts nothing (ON CONFLICT DO NOTHING) and returns the winner's card."""
    result: list[int] = []
    with db.write() as conn:
        winner = cards.add(conn, NewCard("winner", key="k"), kb.clock()).card
        loser = threading.Thread(target=lambda: result.append(
            kb.add(NewCard("loser", key="k")).card.id))
        loser.start()
        wait_until(lambda: _waiting_on_locks(db), timeout=30, what="the loser to block")
    loser.join(timeout=10)
    assert result == [winner.id]
    assert [c.title for c in kb.list_cards()] == ["winner"]


def _waiting_on_locks(db: Database) -> int:
    """Sessions of this database waiting on a lock, from a fresh transaction each time
    (pg_stat_activity is a snapshot for the rest of the transaction that reads it)."""
    with db.read() as watch:  # nested in the test's write: a connection of its own
        return int(watch.scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                "current_database() AND wait_event_type = 'Lock'"))
