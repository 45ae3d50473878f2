"""Idempotent adds: an unfinished card of the board holding the key is returned instead."""

from __future__ import annotations

import threading

import pytest

from kanban.cards import NewCard
from kanban.errors import InvalidTransition, ValidationError
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import STORES, events_of

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def test_the_same_key_returns_the_unfinished_card(kb: Kanban, db: Database) -> None:
    first = kb.add(NewCard("nightly report", key="report-2025-01-01"))
    again = kb.add(NewCard("a different title", key="report-2025-01-01", priority=5))
    assert first.created and not again.created
    assert again.card == first.card  # nothing of the second add was applied
    assert [c.id for c in kb.list_cards()] == [first.card.id]
    assert [e["kind"] for e in events_of(db, first.card.id)] == ["created"]
    assert events_of(db, first.card.id)[0]["data"]["key"] == "report-2025-01-01"


def test_keys_are_per_board_and_cards_without_a_key_never_match(kb: Kanban) -> None:
    kb.create_board("ops")
    a = kb.add(NewCard("x", key="k")).card
    b = kb.add(NewCard("x", key="k", board="ops")).card
    assert a.id != b.id
    plain = [kb.add(NewCard("x")).card.id for _ in range(2)]
    assert len(set(plain)) == 2


@pytest.mark.parametrize("finish", ["complete", "cancel"])
def test_a_finished_card_frees_its_key(kb: Kanban, finish: str) -> None:
    old = kb.add(NewCard("x", key="k")).card
    if finish == "complete":
        kb.complete(old.id, "done")
    else:
        kb.cancel(old.id)
    new = kb.add(NewCard("x", key="k"))
    assert new.created and new.card.id != old.id
    # The old card cannot come back while the new one holds the key.
    with pytest.raises(InvalidTransition, match=f"#{new.card.id} holds its key"):
        kb.retry(old.id)
    kb.cancel(new.card.id)
    assert kb.retry(old.id).status == "ready"


def test_a_key_matches_whatever_state_the_card_is_in(kb: Kanban) -> None:
    card = kb.add(NewCard("x", key="k")).card
    kb.block(card.id, "needs a human")
    again = kb.add(NewCard("x", key="k"))
    assert not again.created and again.card.status == "blocked"


@pytest.mark.parametrize("bad", ["", "   ", "two\nlines", "x" * 201, "bell\x07"])
def test_bad_keys_are_refused(kb: Kanban, bad: str) -> None:
    with pytest.raises(ValidationError):
        kb.add(NewCard("x", key=bad))
    assert kb.list_cards() == []


def test_concurrent_adds_with_one_key_create_one_card(kb: Kanban, db: Database) -> None:
    """Threads hold their own connections; on PostgreSQL the inserts really race."""
    start = threading.Barrier(8)
    ids: list[int] = []
    errors: list[BaseException] = []

    def add() -> None:
        try:
            start.wait()
            ids.append(kb.add(NewCard("raced", key="same")).card.id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(ids)) == 1 and len(ids) == 8
    assert len(kb.list_cards()) == 1

