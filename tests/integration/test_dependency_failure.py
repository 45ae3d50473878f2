"""on_dependency_failure on every store: block or cancel, per card or per board, cascading.

Without a server on 127.0.0.1:5432 the postgres cases skip (CI=true makes that a failure).
"""

from __future__ import annotations

import pytest

from kanban import transitions
from kanban.cards import NewCard
from kanban.errors import BoardNotFound, ValidationError
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import CardStatus
from tests.support.db import STORES, claim_one, events_of, worker

S = CardStatus
pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def _fail(kb: Kanban, card_id: int, error: str) -> None:
    claim = claim_one(kb, card_id)
    with kb.db.write() as conn:
        transitions.fail(conn, card_id, error, now=kb.clock(), actor=worker(claim))


def test_cancel_policy_cancels_the_dependent_naming_the_dependency(
        kb: Kanban, db: Database) -> None:
    dep = kb.add_card(NewCard("dependency"))
    gone = kb.add_card(NewCard("cancel me", depends_on=[dep.id], on_dependency_failure="cancel"))
    waits = kb.add_card(NewCard("block me", depends_on=[dep.id]))
    _fail(kb, dep.id, "the model gave up")
    cancelled = kb.card(gone.id)
    assert cancelled.status == S.CANCELLED and cancelled.finished_at == kb.clock()
    assert cancelled.error == f"dependency #{dep.id} failed: the model gave up"
    assert kb.card(waits.id).status == S.BLOCKED  # the default policy, beside it
    (event,) = [e for e in events_of(db, gone.id) if e["kind"] == "dependency_cancelled"]
    assert event["data"]["depends_on_id"] == dep.id
    assert (event["data"]["from"], event["data"]["to"]) == ("todo", "cancelled")
    assert event["data"]["reason"] == cancelled.error
    assert event["actor"] == f"card:#{dep.id}"


def test_the_cancel_cascades_by_each_dependents_own_policy(kb: Kanban) -> None:
    root = kb.add_card(NewCard("root"))
    mid = kb.add_card(NewCard("mid", depends_on=[root.id], on_dependency_failure="cancel"))
    leaf_cancel = kb.add_card(NewCard("leaf c", depends_on=[mid.id],
                                      on_dependency_failure="cancel"))
    leaf_block = kb.add_card(NewCard("leaf b", depends_on=[mid.id]))
    below = kb.add_card(NewCard("below", depends_on=[leaf_cancel.id],
                                on_dependency_failure="cancel"))
    kb.cancel(root.id, reason="not needed")
    assert kb.card(mid.id).status == S.CANCELLED
    assert kb.card(mid.id).error == f"dependency #{root.id} was cancelled: not needed"
    assert kb.card(leaf_cancel.id).status == S.CANCELLED
    assert kb.card(below.id).status == S.CANCELLED
    blocked = kb.card(leaf_block.id)
    assert blocked.status == S.BLOCKED
    assert blocked.error == (f"dependency #{mid.id} was cancelled: dependency #{root.id} was "
                             "cancelled: not needed")


def test_the_board_default_applies_and_a_cards_own_setting_wins(kb: Kanban) -> None:
    kb.create_board("strict", on_dependency_failure="cancel")
    dep = kb.add_card(NewCard("dependency", board="strict"))
    follows_board = kb.add_card(NewCard("board's", board="strict", depends_on=[dep.id]))
    own = kb.add_card(NewCard("own", board="strict", depends_on=[dep.id],
                              on_dependency_failure="block"))
    assert kb.detail(follows_board.id).on_dependency_failure == "cancel"
    assert kb.detail(own.id).on_dependency_failure == "block"
    _fail(kb, dep.id, "broken")
    assert kb.card(follows_board.id).status == S.CANCELLED
    assert kb.card(own.id).status == S.BLOCKED


def test_setting_the_boards_policy_applies_to_cards_already_waiting(kb: Kanban,
                                                                     db: Database) -> None:
    dep = kb.add_card(NewCard("dependency"))
    waiting = kb.add_card(NewCard("waits", depends_on=[dep.id]))
    assert kb.set_dependency_policy("default", "cancel") is True
    assert kb.set_dependency_policy("default", "cancel") is False  # no change, no event
    assert [b["on_dependency_failure"] for b in kb.boards()] == ["cancel"]
    kb.cancel(dep.id)
    assert kb.card(waiting.id).status == S.CANCELLED
    with db.read() as conn:
        edits = conn.column("SELECT data FROM event WHERE kind = 'board_edited'")
    assert len(edits) == 1 and '"to": "cancel"' in edits[0]


def test_retrying_the_dependency_leaves_cancelled_dependents_cancelled(kb: Kanban) -> None:
    dep = kb.add_card(NewCard("dependency"))
    gone = kb.add_card(NewCard("cancelled", depends_on=[dep.id], on_dependency_failure="cancel"))
    blocked = kb.add_card(NewCard("blocked", depends_on=[dep.id]))
    _fail(kb, dep.id, "flaky")
    kb.retry(dep.id)
    assert kb.card(gone.id).status == S.CANCELLED
    assert kb.card(blocked.id).status == S.TODO  # released: it waits for the retry
    kb.complete(dep.id, "fine now")
    assert kb.card(gone.id).status == S.CANCELLED
    assert kb.card(blocked.id).status == S.READY
    kb.retry(gone.id)  # the user's own retry brings it back
    assert kb.card(gone.id).status == S.READY


def test_a_dependent_retried_while_its_dependency_is_failed_is_blocked_on_it(
        kb: Kanban) -> None:
    dep = kb.add_card(NewCard("dependency"))
    gone = kb.add_card(NewCard("cancelled", depends_on=[dep.id], on_dependency_failure="cancel"))
    _fail(kb, dep.id, "broken")
    again = kb.retry(gone.id)  # not todo forever, and not cancelled at once again
    assert again.status == S.BLOCKED
    assert again.error == f"dependency #{dep.id} is failed"
    kb.retry(dep.id)
    assert kb.card(gone.id).status == S.TODO
    kb.complete(dep.id, "done")
    assert kb.card(gone.id).status == S.READY


def test_unblocking_while_the_dependency_is_cancelled_blocks_again(kb: Kanban) -> None:
    dep = kb.add_card(NewCard("dependency"))
    waiting = kb.add_card(NewCard("waits", depends_on=[dep.id]))
    kb.cancel(dep.id)
    assert kb.unblock(waiting.id, "try").status == S.BLOCKED
    assert kb.card(waiting.id).error == f"dependency #{dep.id} is cancelled"
    kb.unlink(waiting.id, dep.id)
    assert kb.unblock(waiting.id, "go on without it").status == S.READY


def test_edit_sets_the_policy_and_bad_values_are_refused(kb: Kanban) -> None:
    from kanban.edits import CardEdit

    dep = kb.add_card(NewCard("dependency"))
    card = kb.add_card(NewCard("waits", depends_on=[dep.id]))
    assert card.on_dependency_failure is None
    edited, changed = kb.edit(card.id, CardEdit(on_dependency_failure="cancel"))
    assert changed == ["on_dependency_failure"] and edited.on_dependency_failure == "cancel"
    with pytest.raises(ValidationError, match="must be block or cancel, not 'drop'"):
        kb.edit(card.id, CardEdit(on_dependency_failure="drop"))
    with pytest.raises(ValidationError, match="must be block or cancel"):
        kb.add_card(NewCard("bad", on_dependency_failure="ignore"))
    with pytest.raises(BoardNotFound):
        kb.set_dependency_policy("nosuch", "cancel")
    _fail(kb, dep.id, "x")
    assert kb.card(card.id).status == S.CANCELLED


def test_an_edit_can_give_the_policy_back_to_the_board(kb: Kanban) -> None:
    from kanban.edits import CardEdit

    kb.create_board("strict", on_dependency_failure="cancel")
    dep = kb.add_card(NewCard("dependency", board="strict"))
    card = kb.add_card(NewCard("waits", board="strict", depends_on=[dep.id],
                               on_dependency_failure="block"))
    assert kb.detail(card.id).on_dependency_failure == "block"
    edited, changed = kb.edit(card.id, CardEdit(on_dependency_failure="board"))
    assert changed == ["on_dependency_failure"] and edited.on_dependency_failure is None
    assert kb.detail(card.id).on_dependency_failure == "cancel"  # the board's, now
    assert kb.edit(card.id, CardEdit(on_dependency_failure="board"))[1] == []  # no change
    _fail(kb, dep.id, "x")
    assert kb.card(card.id).status == S.CANCELLED


def test_adding_or_linking_a_card_to_a_failed_dependency_blocks_it_at_once(
        kb: Kanban, db: Database) -> None:
    dep = kb.add_card(NewCard("dependency"))
    _fail(kb, dep.id, "broken")
    added = kb.add_card(NewCard("late", depends_on=[dep.id], on_dependency_failure="cancel"))
    assert added.status == S.BLOCKED and added.error == f"dependency #{dep.id} is failed"
    assert [e["kind"] for e in events_of(db, added.id)] == ["created", "dependency_blocked"]
    other = kb.add_card(NewCard("ready one"))
    kb.link(other.id, dep.id)
    assert kb.card(other.id).status == S.BLOCKED
    kb.retry(dep.id)
    assert (kb.card(added.id).status, kb.card(other.id).status) == (S.TODO, S.TODO)
