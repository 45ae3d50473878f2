"""A delegating card waits on its children without a worker and resumes when they finish."""

from __future__ import annotations

import json

import pytest

from kanban import transitions
from kanban.agent.types import Message, ToolCall
from kanban.cards import NewCard
from kanban.children import ChildTask, Delegation, add_children
from kanban.errors import InvalidTransition, LimitExceeded
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import CardStatus
from kanban.worker.resume import stored_conversation
from tests.support.db import (
    STORES,
    claim_one,
    events_of,
    fail,
    runs_of,
    status_events,
    wait_on_children,
    worker,
)

S = CardStatus
pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def _waiting_parent(kb: Kanban, children: int = 2) -> tuple[int, list[int]]:
    parent = kb.add_card(NewCard("orchestrate", role="orchestrator"))
    claim = claim_one(kb, parent.id)
    kids = [kb.add_card(NewCard(f"child {n}", parent_id=parent.id)).id for n in range(children)]
    after = wait_on_children(kb, parent.id, actor=worker(claim))
    assert after.status == S.WAITING and after.lease_expires_at is None
    return parent.id, kids


def test_waiting_closes_the_run_and_spends_no_attempt(kb: Kanban, db: Database) -> None:
    parent, kids = _waiting_parent(kb)
    (run,) = runs_of(db, parent)
    assert run["outcome"] == "waiting" and run["finished_at"] is not None
    card = kb.card(parent)
    assert card.attempt - card.retry_base == 0
    assert json.loads(card.waiting_on or "")["children"] == kids
    move = status_events(db, parent)[-1]
    assert (move["kind"], move["data"]["to"], move["data"]["children"]) == (
        "waiting", "waiting", kids)
    assert [c.card_id for c in kb.claim(5, lease_s=30)] == kids  # never the waiting card


def test_the_last_child_to_finish_returns_the_parent_to_ready(kb: Kanban, db: Database) -> None:
    parent, (first, second) = _waiting_parent(kb)
    kb.complete(first, "one")
    assert kb.card(parent).status == S.WAITING
    kb.complete(second, "two")
    assert kb.card(parent).status == S.READY
    resumed = status_events(db, parent)[-1]
    assert (resumed["kind"], resumed["actor"], resumed["data"]["from"]) == (
        "resumed", f"card:#{second}", "waiting")
    assert claim_one(kb).card_id == parent


@pytest.mark.parametrize("ending", ["failed", "cancelled", "blocked"])
def test_a_failed_cancelled_or_blocked_child_also_counts_as_finished(kb: Kanban,
                                                                     ending: str) -> None:
    parent, (first, second) = _waiting_parent(kb)
    kb.complete(first, "one")
    if ending == "failed":
        claim_one(kb, second)
        fail(kb, second)
    elif ending == "cancelled":
        kb.cancel(second, reason="no longer needed")
    else:
        kb.block(second, "needs a human")
    assert kb.card(parent).status == S.READY


def test_children_already_finished_make_the_wait_end_at_once(kb: Kanban, db: Database) -> None:
    parent = kb.add_card(NewCard("orchestrate"))
    claim = claim_one(kb, parent.id)
    kid = kb.add_card(NewCard("quick", parent_id=parent.id))
    kb.complete(kid.id, "already")
    with db.write() as conn:
        card = transitions.wait(conn, parent.id, Delegation((kid.id,)), now=kb.clock(),
                                actor=worker(claim))
    assert card.status == S.READY
    assert [e["kind"] for e in status_events(db, parent.id)][-2:] == ["waiting", "resumed"]


def test_a_waiting_card_can_be_cancelled_but_not_completed(kb: Kanban) -> None:
    parent, (first, second) = _waiting_parent(kb)
    kb.complete(first, "one")
    with pytest.raises(InvalidTransition, match="it is waiting"):
        kb.complete(parent, "done by hand")
    assert kb.cancel(parent, reason="changed my mind").status == S.CANCELLED
    # nobody waits for the unfinished child any more
    assert [kb.card(k).status for k in (first, second)] == [S.DONE, S.CANCELLED]
    assert kb.card(second).error == f"its parent #{parent} was cancelled"


def test_a_manual_retry_starts_a_fresh_conversation(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("try"))
    claim_one(kb, card.id)
    fail(kb, card.id)
    after = kb.retry(card.id)
    assert after.resume_base == after.attempt == 1 and after.waiting_on is None


def test_an_orchestrator_child_must_be_able_to_delegate(kb: Kanban, db: Database) -> None:
    parent = kb.add_card(NewCard("top"))
    with db.write() as conn, pytest.raises(LimitExceeded, match="max_depth is 1"):
        add_children(conn, parent.id, [ChildTask("sub", role="orchestrator")], model=None,
                     timeout_s=None, max_attempts=1, max_depth=1, now=kb.clock())
    with db.write() as conn:
        (kid,) = add_children(conn, parent.id, [ChildTask("sub", role="orchestrator")],
                              model=None, timeout_s=None, max_attempts=1, max_depth=2,
                              now=kb.clock())
    assert kb.card(kid).role == "orchestrator" and kb.card(kid).depth == 1


def test_a_gated_child_keeps_its_parent_waiting_until_the_gate_passes(kb: Kanban,
                                                                      db: Database) -> None:
    parent = kb.add_card(NewCard("lead", role="orchestrator"))
    claim = claim_one(kb, parent.id)
    with db.write() as conn:
        (kid,) = add_children(conn, parent.id, [ChildTask("checked", review="human")],
                              model=None, timeout_s=None, max_attempts=1, max_depth=2,
                              now=kb.clock())
    assert kb.card(kid).review == "human"
    wait_on_children(kb, parent.id, actor=worker(claim))
    kb.complete(kid, "my work", actor=worker(claim_one(kb, kid)))
    assert kb.card(kid).status == S.REVIEW and kb.card(parent.id).status == S.WAITING
    kb.approve(kid)
    assert kb.card(kid).status == S.DONE and kb.card(parent.id).status == S.READY


# The conversation a resumed card continues


def test_the_stored_conversation_is_the_last_runs(kb: Kanban, db: Database) -> None:
    from kanban import claims

    parent, (kid,) = _waiting_parent(kb, children=1)
    (run,) = runs_of(db, parent)
    delegating = Message("assistant", "", tool_calls=(ToolCall("d", "delegate", "{}"),))
    with db.write() as conn:
        for seq, message in enumerate([Message("system", "s"), Message("user", "go"),
                                       delegating], start=1):
            claims.append_message(conn, run["id"], seq, message.to_dict(), now=kb.clock())
    kb.complete(kid, "child result")
    claim = claim_one(kb, parent)
    with db.read() as conn:
        convo = stored_conversation(conn, kb.card(parent), claim.run_id)
    assert convo is not None and [m.role for m in convo] == ["system", "user", "assistant",
                                                             "tool"]
    children = json.loads(convo[-1].content or "")["children"]
    assert children == [{"id": kid, "title": "child 0", "status": "done",
                         "summary": "child result"}]
    assert [e["kind"] for e in events_of(db, parent)].count("resumed") == 1


def test_a_card_reused_by_key_wakes_every_card_waiting_on_it(kb: Kanban, db: Database) -> None:
    first, (shared,) = _waiting_parent(kb, children=1)
    other = kb.add_card(NewCard("another orchestrator", priority=5))
    claim = claim_one(kb, other.id)
    with db.write() as conn:  # its delegate task named the key `shared` holds
        transitions.wait(conn, other.id, Delegation((shared,)), now=kb.clock(),
                         actor=worker(claim))
    kb.complete(shared, "for both")
    assert [kb.card(c).status for c in (first, other.id)] == [S.READY, S.READY]


def test_the_safety_net_resumes_a_card_whose_children_finished(kb: Kanban,
                                                                db: Database) -> None:
    parent, (kid,) = _waiting_parent(kb, children=1)
    with db.write() as conn:  # as if the child had finished without its transition's wake
        conn.run("UPDATE card SET status = 'done' WHERE id = :id", {"id": kid})
    assert kb.resume_settled() == [parent]
    assert kb.card(parent).status == S.READY and kb.resume_settled() == []


def test_the_safety_net_takes_no_write_lock_when_nothing_waits(
        kb: Kanban, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dispatcher asks every tick: on a board with no waiting card, only a read."""
    writes = []
    write = db.write
    monkeypatch.setattr(db, "write", lambda: writes.append(1) or write())
    assert kb.resume_settled() == [] and writes == []
    _waiting_parent(kb, children=1)
    writes.clear()
    assert kb.resume_settled() == [] and writes == [1]  # one waits: looked at in a write


def test_a_worker_completing_a_child_resumes_its_parent(kb: Kanban, db: Database) -> None:
    """On PostgreSQL too, where a worker's completion is otherwise one statement."""
    parent, (kid,) = _waiting_parent(kb, children=1)
    claim = claim_one(kb, kid)
    kb.complete(kid, "done", actor=worker(claim))
    assert kb.card(parent).status == S.READY
