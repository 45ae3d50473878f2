"""Races between write transactions that every store must serialise."""

from __future__ import annotations

import threading

import pytest

from kanban.cards import NewCard
from kanban.dependencies import link
from kanban.errors import DependencyError
from kanban.service import Kanban
from kanban.state.store import Database

HOLD_S = 0.2


@pytest.mark.parametrize("store", [
    "sqlite",
    pytest.param("postgres", marks=[pytest.mark.postgres]),
], indirect=True)
def test_concurrent_opposite_links_cannot_close_a_cycle(db: Database) -> None:
    kb = Kanban(db)
    one, two = kb.add_card(NewCard("one")), kb.add_card(NewCard("two"))
    first_linked, second_done = threading.Event(), threading.Event()
    outcomes: dict[str, str] = {}

    def first() -> None:
        """Link one → two and hold the transaction open while the second link runs."""
        try:
            with db.write() as conn:
                link(conn, one.id, two.id, actor="user", now=kb.clock())
                first_linked.set()
                second_done.wait(timeout=HOLD_S)  # SQLite: the second waits for our lock
            outcomes["first"] = "linked"
        except DependencyError:
            outcomes["first"] = "refused"
        finally:
            first_linked.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert first_linked.wait(timeout=30)
    try:
        with db.write() as conn:
            link(conn, two.id, one.id, actor="user", now=kb.clock())
        outcomes["second"] = "linked"
    except DependencyError:
        outcomes["second"] = "refused"
    finally:
        second_done.set()
    thread.join(timeout=30)
    assert sorted(outcomes.values()) == ["linked", "refused"]
    one_needs = {c.id for c in kb.detail(one.id).depends_on}
    two_needs = {c.id for c in kb.detail(two.id).depends_on}
    assert not (two.id in one_needs and one.id in two_needs), "a dependency cycle was stored"
