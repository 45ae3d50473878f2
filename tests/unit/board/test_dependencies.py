"""Dependencies: same board only, no cycles, and their effect on todo/ready."""

from __future__ import annotations

import pytest

from kanban import transitions
from kanban.cards import NewCard
from kanban.errors import CardNotFound, DependencyError
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import CardStatus
from kanban.transitions import Actor
from tests.support.db import (
    claim_one,
    event_count,
    events_of,
    put_card_in,
    requeue,
    status_events,
)

S = CardStatus


def test_a_card_cannot_depend_on_itself(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("task"))
    events = event_count(db)
    with pytest.raises(DependencyError, match=r"cannot depend on itself \(#1\)"):
        kb.link(card.id, card.id)
    assert event_count(db) == events and kb.detail(card.id).depends_on == ()


def test_dependencies_stay_on_one_board(kb: Kanban) -> None:
    kb.create_board("other")
    here = kb.add_card(NewCard("here"))
    there = kb.add_card(NewCard("there", board="other"))
    with pytest.raises(DependencyError, match="dependencies stay on one board"):
        kb.link(here.id, there.id)
    with pytest.raises(DependencyError, match="dependencies stay on one board"):
        kb.add_card(NewCard("new", depends_on=[there.id]))
    assert [c.id for c in kb.list_cards(board="default")] == [here.id]


def test_a_cycle_is_refused_and_named(kb: Kanban, db: Database) -> None:
    one, two = kb.add_card(NewCard("one")), kb.add_card(NewCard("two"))
    assert kb.link(two.id, one.id)
    with pytest.raises(DependencyError, match="would close a cycle: #1 → #2 → #1$"):
        kb.link(one.id, two.id)
    three = kb.add_card(NewCard("three", depends_on=[two.id]))
    events = event_count(db)
    with pytest.raises(DependencyError, match="cycle: #1 → #3 → #2 → #1$"):
        kb.link(one.id, three.id)
    assert event_count(db) == events
    assert [c.id for c in kb.detail(one.id).depends_on] == []


def test_linking_to_an_unknown_card_is_refused(kb: Kanban) -> None:
    card = kb.add_card(NewCard("task"))
    with pytest.raises(CardNotFound, match="no card #99"):
        kb.link(card.id, 99)
    with pytest.raises(CardNotFound, match="no card #99"):
        kb.link(99, card.id)
    with pytest.raises(CardNotFound, match="no card #99"):
        kb.add_card(NewCard("new", depends_on=[99]))
    assert [c.id for c in kb.list_cards()] == [card.id]


@pytest.mark.parametrize("status", [S.RUNNING, S.DONE, S.FAILED, S.CANCELLED])
def test_a_started_or_finished_card_takes_no_new_dependency(kb: Kanban, status: S) -> None:
    card = put_card_in(kb, status)
    other = kb.add_card(NewCard("other"))
    with pytest.raises(DependencyError, match=f"it is {status}"):
        kb.link(card.id, other.id)


def test_linking_a_ready_card_to_an_unfinished_one_demotes_it(kb: Kanban, db: Database) -> None:
    card, blocker = kb.add_card(NewCard("card")), kb.add_card(NewCard("blocker"))
    assert kb.link(card.id, blocker.id) is True
    assert kb.link(card.id, blocker.id) is False  # already there: nothing new
    assert kb.card(card.id).status == S.TODO
    (demoted,) = status_events(db, card.id)
    assert (demoted["kind"], demoted["data"]["from"], demoted["data"]["to"]) == (
        "demoted", "ready", "todo")
    assert [e["kind"] for e in events_of(db, card.id)] == ["created", "linked", "demoted"]
    assert kb.claim(5, lease_s=30)[0].card_id == blocker.id


def test_linking_to_a_done_card_keeps_ready(kb: Kanban) -> None:
    card, done = kb.add_card(NewCard("card")), put_card_in(kb, S.DONE)
    kb.link(card.id, done.id)
    assert kb.card(card.id).status == S.READY


def test_unlinking_the_last_unfinished_dependency_promotes(kb: Kanban) -> None:
    card = put_card_in(kb, S.TODO)
    (dep,) = kb.detail(card.id).depends_on
    kb.unlink(card.id, dep.id)
    assert kb.card(card.id).status == S.READY
    with pytest.raises(DependencyError, match=f"#{card.id} does not depend on #{dep.id}"):
        kb.unlink(card.id, dep.id)


def test_detail_shows_both_directions(kb: Kanban) -> None:
    a = kb.add_card(NewCard("a"))
    b = kb.add_card(NewCard("b", depends_on=[a.id]))
    assert [c.id for c in kb.detail(b.id).depends_on] == [a.id]
    assert [c.id for c in kb.detail(a.id).dependents] == [b.id]


def _fail(kb: Kanban, card_id: int, error: str) -> None:
    claim = claim_one(kb, card_id)
    with kb.db.write() as conn:
        transitions.fail(conn, card_id, error, now=kb.clock(),
                         actor=Actor("dispatcher:1", claim.claim_token))


def test_a_failed_dependency_blocks_its_dependents_with_a_reason_naming_it(
        kb: Kanban, db: Database) -> None:
    dep = kb.add_card(NewCard("dependency"))
    waiting = kb.add_card(NewCard("waits", depends_on=[dep.id]))
    after = kb.add_card(NewCard("waits on the waiter", depends_on=[waiting.id]))
    _fail(kb, dep.id, "the model gave up")
    blocked = kb.card(waiting.id)
    assert blocked.status == S.BLOCKED
    assert blocked.error == f"dependency #{dep.id} failed: the model gave up"
    assert kb.card(after.id).status == S.TODO  # it waits on a blocked card, which says why
    (event,) = [e for e in events_of(db, waiting.id) if e["kind"] == "dependency_blocked"]
    assert event["data"]["depends_on_id"] == dep.id
    assert kb.claim(5, lease_s=30) == []  # nothing claimable: blocked is for a human


def test_retrying_the_dependency_to_done_runs_the_dependent(kb: Kanban) -> None:
    dep = kb.add_card(NewCard("dependency"))
    waiting = kb.add_card(NewCard("waits", depends_on=[dep.id]))
    _fail(kb, dep.id, "flaky")
    kb.retry(dep.id)
    assert kb.card(waiting.id).status == S.TODO and kb.card(waiting.id).error is None
    claim = claim_one(kb, dep.id)
    kb.complete(dep.id, "fine now", actor=Actor("worker", claim.claim_token))
    assert kb.card(waiting.id).status == S.READY
    assert claim_one(kb).card_id == waiting.id


@pytest.mark.parametrize("back", ["requeued", "handed back"])
def test_a_card_whose_dependency_was_redone_while_it_ran_goes_back_to_todo(
        kb: Kanban, back: str) -> None:
    """Its dependency done, the card runs; the dependency is retried meanwhile; the card's
    run ends without a result (a crash, a lapsed lease, a dispatcher stopping): it must wait
    for the redone dependency again, not be claimable at once (found by the state machine)."""
    dep = kb.add_card(NewCard("dependency"))
    claim = claim_one(kb, dep.id)
    kb.complete(dep.id, "first result", actor=Actor("worker", claim.claim_token))
    waiting = kb.add_card(NewCard("uses it", depends_on=[dep.id]))
    claim_one(kb, waiting.id)
    kb.retry(dep.id)
    if back == "requeued":
        requeue(kb, waiting.id)
    else:
        with kb.db.write() as conn:
            transitions.hand_back(conn, waiting.id, "the dispatcher stopped", now=kb.clock(),
                                  actor=Actor("dispatcher"))
    assert kb.card(dep.id).status == S.READY
    assert kb.card(waiting.id).status == S.TODO
    assert claim_one(kb).card_id == dep.id  # the dependency first, the card after it
    assert kb.claim(1, lease_s=30) == []


def test_a_cancelled_dependency_blocks_and_completing_it_by_hand_releases(kb: Kanban) -> None:
    dep = kb.add_card(NewCard("dependency"))
    waiting = kb.add_card(NewCard("waits", depends_on=[dep.id]))
    kb.cancel(dep.id, reason="not needed")
    card = kb.card(waiting.id)
    assert card.status == S.BLOCKED
    assert card.error == f"dependency #{dep.id} was cancelled: not needed"
    kb.retry(dep.id)
    kb.complete(dep.id, "done by hand")
    assert kb.card(waiting.id).status == S.READY


def test_a_card_blocked_for_another_reason_stays_blocked(kb: Kanban) -> None:
    dep = kb.add_card(NewCard("dependency"))
    waiting = kb.add_card(NewCard("waits", depends_on=[dep.id]))
    kb.block(waiting.id, "needs a human anyway")
    _fail(kb, dep.id, "broken")
    kb.retry(dep.id)
    assert kb.card(waiting.id).status == S.BLOCKED
    assert kb.card(waiting.id).error == "needs a human anyway"
