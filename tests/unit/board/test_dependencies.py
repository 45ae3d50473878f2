"""Dependencies: same board only, no cycles, and their effect on todo/ready."""

from __future__ import annotations

import pytest

from kanban.cards import NewCard
from kanban.errors import CardNotFound, DependencyError
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import CardStatus
from tests.support.db import event_count, events_of, put_card_in, status_events

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
