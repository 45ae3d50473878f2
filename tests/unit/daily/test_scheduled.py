"""Scheduled cards: not claimable before their time, released by the claim once due."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kanban import claims
from kanban.cards import NewCard
from kanban.claims import ClaimFilter
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import STORES, FakeClock, events_of, status_events

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)
LEASE = 30.0


def test_a_card_with_a_future_time_is_scheduled(kb: Kanban, db: Database,
                                                clock: FakeClock) -> None:
    at = clock() + timedelta(hours=2)
    card = kb.add_card(NewCard("later", run_at=at))
    assert card.status == "scheduled" and card.run_after == at
    (created,) = events_of(db, card.id)
    assert created["data"]["to"] == "scheduled"
    assert created["data"]["scheduled_for"] == at.isoformat()
    # A time already reached is no schedule at all.
    assert kb.add_card(NewCard("now", run_at=clock())).status == "ready"


def test_not_claimed_before_its_time_and_claimed_once_due(kb: Kanban, db: Database,
                                                          clock: FakeClock) -> None:
    at = clock() + timedelta(seconds=90)
    card = kb.add_card(NewCard("later", run_at=at))
    with db.read() as conn:
        assert not claims.has_claimable(conn, now=clock())
        assert claims.next_due(conn, now=clock()) == at
    clock.advance(89.999)
    assert kb.claim(5, lease_s=LEASE) == []
    assert kb.card(card.id).status == "scheduled"
    clock.advance(0.001)
    with db.read() as conn:
        assert claims.has_claimable(conn, now=clock())
    (claim,) = kb.claim(5, lease_s=LEASE)
    assert claim.card_id == card.id
    moves = [(e["kind"], e["data"]["from"], e["data"]["to"]) for e in status_events(db, card.id)]
    assert moves == [("due", "scheduled", "ready"), ("claimed", "ready", "running")]


def test_next_due_is_the_earliest_of_backoffs_and_schedules(kb: Kanban, db: Database,
                                                            clock: FakeClock) -> None:
    kb.add_card(NewCard("in an hour", run_at=clock() + timedelta(hours=1)))
    soon = clock() + timedelta(minutes=5)
    kb.add_card(NewCard("in five minutes", run_at=soon))
    with db.read() as conn:
        assert claims.next_due(conn, now=clock()) == soon


def test_a_due_card_waits_in_todo_for_unfinished_dependencies(kb: Kanban,
                                                              clock: FakeClock) -> None:
    dep = kb.add_card(NewCard("first"))
    card = kb.add_card(NewCard("later", run_at=clock() + timedelta(minutes=1),
                               depends_on=[dep.id]))
    assert card.status == "scheduled"
    (claim,) = kb.claim(1, lease_s=LEASE)
    assert claim.card_id == dep.id
    clock.advance(120)
    assert kb.claim(1, lease_s=LEASE) == []  # released, but to todo
    assert kb.card(card.id).status == "todo"
    kb.complete(dep.id, "done")
    assert kb.card(card.id).status == "ready"


def test_a_dependency_finishing_early_does_not_start_a_scheduled_card(
        kb: Kanban, clock: FakeClock) -> None:
    dep = kb.add_card(NewCard("first"))
    card = kb.add_card(NewCard("later", run_at=clock() + timedelta(minutes=1),
                               depends_on=[dep.id]))
    kb.complete(dep.id, "done")
    assert kb.card(card.id).status == "scheduled"
    clock.advance(60)
    (claim,) = kb.claim(1, lease_s=LEASE)
    assert claim.card_id == card.id


def test_a_scheduled_card_can_be_cancelled(kb: Kanban, clock: FakeClock) -> None:
    card = kb.add_card(NewCard("later", run_at=clock() + timedelta(minutes=1)))
    assert kb.cancel(card.id).status == "cancelled"
    clock.advance(60)
    assert kb.claim(1, lease_s=LEASE) == [] and kb.card(card.id).status == "cancelled"


def test_a_board_filtered_claim_releases_only_its_board(kb: Kanban, clock: FakeClock) -> None:
    kb.create_board("ops")
    here = kb.add_card(NewCard("here", run_at=clock() + timedelta(seconds=1)))
    there = kb.add_card(NewCard("there", board="ops", run_at=clock() + timedelta(seconds=1)))
    clock.advance(1)
    (claim,) = kb.claim(5, lease_s=LEASE, flt=ClaimFilter(board="default"))
    assert claim.card_id == here.id
    assert kb.card(there.id).status == "scheduled"
