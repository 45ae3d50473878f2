"""The state machine, table-driven over every (action, status) pair, and each transition's rules."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from kanban.cards import NewCard
from kanban.errors import InvalidTransition, LeaseLost
from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import ALLOWED, Action, CardStatus, Outcome, verb
from kanban.transitions import Actor
from tests.support.db import (
    FakeClock,
    card_row,
    claim_one,
    event_count,
    events_of,
    fail,
    hand_back,
    put_card_in,
    requeue,
    runs_of,
    status_events,
    wait_on_children,
    worker,
)

S = CardStatus

# How each action checked by the state machine is performed on a card.
PERFORM: dict[Action, Callable[[Kanban, int], CardRecord]] = {
    Action.COMPLETE: lambda kb, cid: kb.complete(cid, "finished by hand"),
    Action.BLOCK: lambda kb, cid: kb.block(cid, "needs a human"),
    Action.UNBLOCK: lambda kb, cid: kb.unblock(cid, "go ahead"),
    Action.REQUEUE: lambda kb, cid: requeue(kb, cid, delay_s=5.0),
    Action.HAND_BACK: lambda kb, cid: hand_back(kb, cid),
    Action.FAIL: lambda kb, cid: fail(kb, cid),
    Action.CANCEL: lambda kb, cid: kb.cancel(cid, reason="not needed"),
    Action.RETRY: lambda kb, cid: kb.retry(cid),
    Action.ARCHIVE: lambda kb, cid: kb.archive(cid),
    Action.WAIT: lambda kb, cid: wait_on_children(kb, cid),
    Action.PASS: lambda kb, cid: kb.approve_review(cid),
    Action.CHANGES: lambda kb, cid: kb.reject(cid, "redo it"),
    Action.TRIAGE: lambda kb, cid: kb.triage(cid, decomposer="default", catalog=""),
}
# Made by workers and decomposers, tested in test_review.py and test_triage.py.
BY_PROCESSES = {Action.SUBMIT, Action.DECOMPOSE}
TARGET = {
    Action.COMPLETE: S.DONE, Action.BLOCK: S.BLOCKED, Action.UNBLOCK: S.READY,
    Action.REQUEUE: S.READY, Action.FAIL: S.FAILED, Action.CANCEL: S.CANCELLED,
    Action.RETRY: S.READY, Action.HAND_BACK: S.READY, Action.WAIT: S.WAITING,
    Action.PASS: S.DONE, Action.CHANGES: S.READY, Action.TRIAGE: S.TRIAGE,
}
EVENT_KIND = {Action.REQUEUE: "requeued", Action.ARCHIVE: "archived",
              Action.HAND_BACK: "handed_back", Action.WAIT: "waiting",
              Action.PASS: "review_passed", Action.CHANGES: "changes_requested",
              Action.TRIAGE: "triaged"}
PAIRS = [(action, status) for action in PERFORM for status in CardStatus]


def test_the_table_covers_every_action() -> None:
    # claim, promote, release and resume happen on their own (resume: see test_waiting.py)
    automatic = {Action.CLAIM, Action.PROMOTE, Action.RELEASE, Action.RESUME}
    assert set(PERFORM) | automatic | BY_PROCESSES == set(Action)
    assert set(ALLOWED) == set(Action)


@pytest.mark.parametrize(("action", "status"), PAIRS, ids=[f"{a}-from-{s}" for a, s in PAIRS])
def test_action_from_status(kb: Kanban, db: Database, action: Action, status: S) -> None:
    card = put_card_in(kb, status)
    if action is Action.WAIT and status is not S.WAITING:
        kb.add_card(NewCard("a child to wait on", parent_id=card.id))
    row, events, moves = card_row(db, card.id), event_count(db), status_events(db, card.id)

    if status not in ALLOWED[action]:
        with pytest.raises(InvalidTransition, match=f"cannot {verb(action)} #{card.id}"):
            PERFORM[action](kb, card.id)
        assert card_row(db, card.id) == row
        assert event_count(db) == events
        return

    after = PERFORM[action](kb, card.id)
    if action is Action.ARCHIVE:  # not a change of state: the card stays where it is
        assert after.status == status and after.archived_at == kb.clock()
        assert [e["kind"] for e in events_of(db, card.id)][-1] == "archived"
        assert event_count(db) == events + 1
        return
    new_moves = status_events(db, card.id)[len(moves):]
    assert len(new_moves) == 1
    (move,) = new_moves
    assert move["kind"] == EVENT_KIND.get(action, str(action))
    assert (move["data"]["from"], move["data"]["to"]) == (status, TARGET[action])
    assert after.status == TARGET[action] == kb.card(card.id).status
    assert move["at"] == kb.clock()


@pytest.mark.parametrize("status", list(CardStatus))
def test_claim_takes_only_ready_cards(kb: Kanban, status: S) -> None:
    card = put_card_in(kb, status)
    claimed = [c.card_id for c in kb.claim(10, lease_s=30)]
    assert (card.id in claimed) == (status in ALLOWED[Action.CLAIM])


@pytest.mark.parametrize("status", list(CardStatus))
def test_promotion_moves_only_todo_cards(kb: Kanban, db: Database, status: S) -> None:
    card = put_card_in(kb, status)
    if status is S.TODO:
        # The dependency finished without promoting (as after a crash): the safety net fixes it.
        with db.write() as conn:
            conn.execute("UPDATE card SET status = 'done' WHERE id != ?", (card.id,))
    promoted = kb.promote_ready()
    assert (card.id in promoted) == (status in ALLOWED[Action.PROMOTE])
    assert kb.card(card.id).status == (S.READY if status is S.TODO else status)
    if status is S.TODO:
        (move,) = status_events(db, card.id)
        assert (move["kind"], move["data"]["from"], move["data"]["to"]) == (
            "promoted", "todo", "ready")


@pytest.mark.parametrize("status", list(CardStatus))
def test_release_moves_only_due_scheduled_cards(kb: Kanban, db: Database, clock: FakeClock,
                                                status: S) -> None:
    card = put_card_in(kb, status)
    assert kb.release_due() == []  # nothing is due yet
    clock.advance(3600)
    released = kb.release_due()
    assert (card.id in released) == (status in ALLOWED[Action.RELEASE])
    assert kb.card(card.id).status == (S.READY if status is S.SCHEDULED else status)
    if status is S.SCHEDULED:
        move = status_events(db, card.id)[-1]
        assert (move["kind"], move["data"]["from"], move["data"]["to"]) == (
            "due", "scheduled", "ready")


# New cards and dependencies


def test_new_card_is_ready_without_unfinished_dependencies(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("write the report"))
    assert card.status == S.READY
    done = put_card_in(kb, S.DONE)
    with_done_dep = kb.add_card(NewCard("follow-up", depends_on=[done.id]))
    assert with_done_dep.status == S.READY
    (created,) = events_of(db, card.id)
    assert created["kind"] == "created" and created["data"]["to"] == "ready"


def test_new_card_is_todo_while_a_dependency_is_unfinished(kb: Kanban, db: Database) -> None:
    done = put_card_in(kb, S.DONE)
    ready = kb.add_card(NewCard("research"))
    card = kb.add_card(NewCard("write", depends_on=[done.id, ready.id]))
    assert card.status == S.TODO
    (created,) = events_of(db, card.id)
    assert created["data"]["to"] == "todo"
    assert created["data"]["depends_on"] == sorted([done.id, ready.id])


def test_completing_promotes_only_dependents_whose_dependencies_are_all_done(
    kb: Kanban, db: Database
) -> None:
    a = kb.add_card(NewCard("a"))
    b = kb.add_card(NewCard("b"))
    only_a = kb.add_card(NewCard("needs a", depends_on=[a.id]))
    a_and_b = kb.add_card(NewCard("needs a and b", depends_on=[a.id, b.id]))
    unrelated = kb.add_card(NewCard("needs b", depends_on=[b.id]))

    kb.complete(a.id, "a is done")
    assert kb.card(only_a.id).status == S.READY
    assert kb.card(a_and_b.id).status == S.TODO
    assert kb.card(unrelated.id).status == S.TODO
    # Same transaction: the promotion is stamped with the completion's time, right after it.
    completed = status_events(db, a.id)[-1]
    (promoted,) = status_events(db, only_a.id)
    assert promoted["kind"] == "promoted" and promoted["at"] == completed["at"]
    assert promoted["id"] == completed["id"] + 1

    kb.complete(b.id, "b is done")
    assert kb.card(a_and_b.id).status == S.READY
    assert kb.card(unrelated.id).status == S.READY


def test_completing_a_running_card_by_worker_promotes_dependents(kb: Kanban) -> None:
    a = kb.add_card(NewCard("a"))
    child = kb.add_card(NewCard("child", depends_on=[a.id]))
    claim = claim_one(kb, a.id)
    kb.complete(a.id, "ok", actor=worker(claim))
    assert kb.card(child.id).status == S.READY


# Block, unblock, cancel, retry, archive


def test_unblock_returns_to_ready_and_the_note_is_a_comment(kb: Kanban, clock: FakeClock) -> None:
    card = put_card_in(kb, S.BLOCKED)
    clock.advance(60)
    after = kb.unblock(card.id, "the API key is in place now")
    assert after.status == S.READY and after.error is None
    assert after.run_after == kb.clock()
    bodies = [c.body for c in kb.detail(card.id).comments]
    assert bodies == ["blocked: needs a human", "unblocked: the API key is in place now"]
    assert claim_one(kb).card_id == card.id


def test_unblock_returns_to_todo_while_dependencies_are_unfinished(kb: Kanban) -> None:
    card = put_card_in(kb, S.TODO)
    kb.block(card.id, "wait for a decision")
    assert kb.unblock(card.id).status == S.TODO
    assert [c.body for c in kb.detail(card.id).comments] == ["blocked: wait for a decision"]


def test_block_of_a_running_card_closes_its_run(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("task"))
    claim_one(kb, card.id)
    blocked = kb.block(card.id, "needs credentials")
    assert blocked.status == S.BLOCKED and blocked.error == "needs credentials"
    (run,) = runs_of(db, card.id)
    assert run["outcome"] == Outcome.BLOCKED and run["finished_at"] == kb.clock()
    assert card_row(db, card.id)["claim_token"] is None


def test_cancel_of_a_running_card_closes_its_run_as_cancelled(
    kb: Kanban, db: Database, clock: FakeClock
) -> None:
    card = kb.add_card(NewCard("task"))
    claim = claim_one(kb, card.id)
    clock.advance(5)
    cancelled = kb.cancel(card.id, reason="changed my mind")
    assert cancelled.status == S.CANCELLED and cancelled.finished_at == kb.clock()
    (run,) = runs_of(db, card.id)
    assert run["outcome"] == Outcome.CANCELLED and run["finished_at"] == kb.clock()
    row = card_row(db, card.id)
    assert row["claim_token"] is None and row["lease_expires_at"] is None
    (move,) = [e for e in status_events(db, card.id) if e["kind"] == "cancel"]
    assert move["run_id"] == claim.run_id


def test_retry_gives_a_fresh_attempt_budget(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("flaky", max_attempts=2))
    claim_one(kb, card.id)
    assert requeue(kb, card.id).status == S.READY
    claim_one(kb, card.id)
    failed = requeue(kb, card.id)
    assert failed.status == S.FAILED and failed.attempt == 2
    assert "no attempts left" in (failed.error or "")

    retried = kb.retry(card.id)
    assert retried.status == S.READY and retried.retry_base == 2
    assert (retried.error, retried.result, retried.finished_at) == (None, None, None)
    claim_one(kb, card.id)
    assert requeue(kb, card.id).status == S.READY  # one attempt of the new budget used
    claim_one(kb, card.id)
    assert requeue(kb, card.id).status == S.FAILED
    assert [r["attempt"] for r in runs_of(db, card.id)] == [1, 2, 3, 4]


def test_retry_of_a_card_with_unfinished_dependencies_goes_to_todo(kb: Kanban) -> None:
    card = put_card_in(kb, S.TODO)
    kb.cancel(card.id)
    assert kb.retry(card.id).status == S.TODO


def test_archive_hides_from_list(kb: Kanban) -> None:
    kept = kb.add_card(NewCard("kept"))
    card = put_card_in(kb, S.DONE)
    kb.archive(card.id)
    assert [c.id for c in kb.list_cards()] == [kept.id]
    assert [c.id for c in kb.list_cards(include_archived=True)] == [kept.id, card.id]
    assert kb.board_snapshot("default").counts["done"] == 0
    kb.retry(card.id)  # a retried card comes back to the board
    assert kb.card(card.id).archived_at is None
    assert card.id in [c.id for c in kb.list_cards()]


# Requeue, backoff, fail


def test_requeue_backs_off_and_claim_waits_for_run_after(
    kb: Kanban, db: Database, clock: FakeClock
) -> None:
    card = kb.add_card(NewCard("flaky"))
    claim = claim_one(kb, card.id)
    requeued = requeue(kb, card.id, outcome=Outcome.LEASE_LOST, delay_s=None)
    now = kb.clock()
    # The first retry waits 2 s scaled by a jitter in [0.5, 1).
    assert now < requeued.run_after <= now + timedelta(seconds=2)
    assert requeued.status == S.READY and requeued.error == "worker crashed"
    (run,) = runs_of(db, card.id)
    assert run["outcome"] == Outcome.LEASE_LOST and run["id"] == claim.run_id

    assert kb.claim(1, lease_s=30) == []
    clock.advance((requeued.run_after - now).total_seconds() - 0.01)
    assert kb.claim(1, lease_s=30) == []
    clock.advance(0.01)
    assert claim_one(kb).card_id == card.id


def test_hand_back_spends_no_attempt_and_waits_for_nothing(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("interrupted by restarts", max_attempts=1))
    for _ in range(3):
        claim = claim_one(kb, card.id)
        back = hand_back(kb, card.id, actor=Actor("dispatcher:1", claim.claim_token))
        assert back.status == S.READY and back.run_after == kb.clock()
        assert back.attempt - back.retry_base == 0  # the budget is whole again
    last = claim_one(kb, card.id)
    assert last.attempt == 4
    crashed = requeue(kb, card.id, actor=worker(last))  # its one real attempt, spent
    assert crashed.status == S.FAILED
    assert [r["outcome"] for r in runs_of(db, card.id)] == [Outcome.HANDED_BACK] * 3 + [
        Outcome.CRASHED]
    assert [e["kind"] for e in status_events(db, card.id)].count("handed_back") == 3


def test_hand_back_is_fenced(kb: Kanban) -> None:
    card = kb.add_card(NewCard("task"))
    stale = claim_one(kb, card.id)
    requeue(kb, card.id)
    claim_one(kb, card.id)
    with pytest.raises(LeaseLost):
        hand_back(kb, card.id, actor=worker(stale))


def test_requeue_with_attempts_exhausted_fails_the_card(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("doomed", max_attempts=1))
    claim_one(kb, card.id)
    failed = requeue(kb, card.id, outcome=Outcome.TIMED_OUT)
    assert failed.status == S.FAILED and failed.finished_at == kb.clock()
    assert failed.error == "worker crashed (attempt 1 of 1; no attempts left)"
    (run,) = runs_of(db, card.id)
    assert run["outcome"] == Outcome.TIMED_OUT
    assert status_events(db, card.id)[-1]["kind"] == "fail"


def test_fail_fails_at_once_without_burning_attempts(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("no credentials", max_attempts=5))
    claim_one(kb, card.id)
    failed = fail(kb, card.id, error="401 unauthorised")
    assert failed.status == S.FAILED and failed.attempt == 1
    assert failed.error == "401 unauthorised"
    (run,) = runs_of(db, card.id)
    assert run["outcome"] == Outcome.FAILED and run["error"] == "401 unauthorised"
    assert kb.claim(1, lease_s=30) == []


def test_retrying_a_done_dependency_sends_ready_dependents_back_to_todo(kb: Kanban) -> None:
    dep = put_card_in(kb, S.DONE)
    card = kb.add_card(NewCard("uses the dependency's result", depends_on=[dep.id]))
    assert card.status == S.READY
    kb.retry(dep.id)
    assert kb.card(card.id).status == S.TODO
    assert [c.card_id for c in kb.claim(5, lease_s=30)] == [dep.id]
