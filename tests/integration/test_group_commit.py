"""Group commit (kanban.group_commit over kanban.batch_writes): writes that arrive together
commit together, yet each is fenced by its own claim token; a stale one is refused alone."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from kanban.batch_writes import ActivityWrite, Completion, Renewal, Write
from kanban.cards import NewCard
from kanban.errors import LeaseLost, ValidationError
from kanban.group_commit import GroupCommitter
from kanban.records import Claim
from kanban.service import Kanban
from kanban.state.errors import TransientDatabaseError
from kanban.state.sqlite import SQLiteDatabase
from kanban.state.store import Conn, Database
from kanban.tools.scope import WorkerScope
from kanban.transitions import Actor
from kanban.worker.activity import Activity
from kanban.worker.heartbeat import HeartbeatThread
from tests.support.db import STORES, FakeClock, card_row, events_of, hand_back, runs_of

BOTH = pytest.mark.parametrize("store", STORES, indirect=True)


def committer(kb: Kanban) -> GroupCommitter:
    return GroupCommitter(kb.db, kb.clock)


def finish(claim: Claim, summary: str = "ok") -> Completion:
    return Completion(claim.card_id, claim.claim_token, summary, f"card:#{claim.card_id}")


def outcomes(gc: GroupCommitter, writes: list[Write]) -> list[object]:
    """Each write's result, or the error that refused it."""
    return [t.exception() or t.result() for t in gc.write_all(writes)]


@BOTH
def test_completions_that_arrive_together_commit_in_one_transaction(kb: Kanban) -> None:
    for n in range(5):
        kb.add_card(NewCard(f"card {n}"))
    claimed = kb.claim(5, lease_s=30)
    gc = committer(kb)
    assert outcomes(gc, [finish(c) for c in claimed]) == [None] * 5
    assert gc.batches == 1
    assert {c.status for c in kb.list_cards()} == {"done"}
    for c in claimed:
        (run,) = runs_of(kb.db, c.card_id)
        assert run["outcome"] == "completed" and run["finished_at"] is not None
        assert events_of(kb.db, c.card_id)[-1]["kind"] == "complete"


@BOTH
def test_a_stale_claim_token_is_refused_alone_and_its_batch_mates_commit(
        kb: Kanban, db: Database) -> None:
    for n in range(4):
        kb.add_card(NewCard(f"card {n}"))
    first, second, third, fourth = kb.claim(4, lease_s=30)
    # #2's claim was taken from this worker (rescued and claimed again): its token is stale
    hand_back(kb, second.card_id)
    (again,) = kb.claim(1, lease_s=30)
    assert again.card_id == second.card_id
    gc = committer(kb)
    got = outcomes(gc, [
        Renewal(first.card_id, first.claim_token, first.run_id, 60, note="half way"),
        Renewal(second.card_id, second.claim_token, second.run_id, 60),
        ActivityWrite(second.card_id, second.claim_token, second.run_id, {"phase": "tool"}),
        ActivityWrite(third.card_id, third.claim_token, third.run_id, {"phase": "tool"}),
        finish(second, "stale"), finish(first), finish(third),
        Completion(fourth.card_id, "0" * 32, "forged", "card:#4"),
    ])
    assert gc.batches == 1
    assert [type(o) for o in got] == [type(got[0]), LeaseLost, LeaseLost, type(None),
                                      LeaseLost, type(None), type(None), LeaseLost]
    assert card_row(db, first.card_id)["status"] == "done"
    assert card_row(db, third.card_id)["status"] == "done"
    stolen = card_row(db, second.card_id)
    assert (stolen["status"], stolen["claim_token"]) == ("running", again.claim_token)
    assert stolen["result"] is None
    assert card_row(db, fourth.card_id)["status"] == "running"
    # the refused writes left nothing behind: no activity, no progress on the old run
    old_run = runs_of(db, second.card_id)[0]
    assert old_run["activity"] is None and old_run["progress"] is None
    assert "progress" in [e["kind"] for e in events_of(db, first.card_id)]


@BOTH
def test_a_second_completion_of_one_card_in_the_same_batch_is_refused(kb: Kanban) -> None:
    kb.add_card(NewCard("once"))
    (claim,) = kb.claim(1, lease_s=30)
    got = outcomes(committer(kb), [finish(claim, "first"), finish(claim, "again")])
    assert got[0] is None and isinstance(got[1], LeaseLost)
    assert kb.card(claim.card_id).result == "first"


@BOTH
def test_bad_input_in_a_batch_is_refused_alone(kb: Kanban) -> None:
    kb.add_card(NewCard("a"))
    kb.add_card(NewCard("b"))
    good, bad = kb.claim(2, lease_s=30)
    got = outcomes(committer(kb), [finish(good), finish(bad, "x" * 10_000_000)])
    assert got[0] is None and isinstance(got[1], ValidationError)
    assert kb.card(good.card_id).status == "done"
    assert kb.card(bad.card_id).status == "running"


@BOTH
def test_dependents_of_cards_finished_in_one_batch_are_promoted(kb: Kanban) -> None:
    left, right = kb.add_card(NewCard("left")), kb.add_card(NewCard("right"))
    both = kb.add_card(NewCard("after both", depends_on=[left.id, right.id]))
    only_left = kb.add_card(NewCard("after left", depends_on=[left.id]))
    claimed = kb.claim(2, lease_s=30)
    assert outcomes(committer(kb), [finish(c) for c in claimed]) == [None, None]
    assert kb.card(both.id).status == "ready"
    assert kb.card(only_left.id).status == "ready"


@BOTH
def test_a_gated_card_in_a_batch_goes_to_review(kb: Kanban) -> None:
    gated = kb.add_card(NewCard("gated", review="human"))
    plain = kb.add_card(NewCard("plain"))
    claimed = kb.claim(2, lease_s=30)
    assert outcomes(committer(kb), [finish(c) for c in claimed]) == [None, None]
    assert kb.card(gated.id).status == "review"
    assert kb.card(plain.id).status == "done"


@BOTH
def test_a_batch_writes_what_single_writes_write(kb: Kanban, db: Database) -> None:
    """Same rows and byte-for-byte the same event data as Kanban.heartbeat/complete."""
    for n in range(4):
        kb.add_card(NewCard(f"card {n}"))
    alone, batched, alone_done, batched_done = kb.claim(4, lease_s=30)
    kb.heartbeat(alone.card_id, alone.claim_token, run_id=alone.run_id, lease_s=30, note="n")
    kb.complete(alone_done.card_id, "ok", actor=Actor(f"card:#{alone_done.card_id}",
                                                      alone_done.claim_token))
    outcomes(committer(kb), [
        Renewal(batched.card_id, batched.claim_token, batched.run_id, 30, note="n"),
        finish(batched_done)])

    def shape(card_id: int) -> list[tuple[object, ...]]:
        with db.read() as conn:  # the stored text, not decoded
            rows = conn.all("SELECT kind, actor, data FROM event WHERE card_id = :id "
                            "ORDER BY id", {"id": card_id})
        return [(kind, actor.replace(f"#{card_id}", "#"), data) for kind, actor, data in rows]

    assert shape(alone.card_id) == shape(batched.card_id)
    assert shape(alone_done.card_id) == shape(batched_done.card_id)
    assert card_row(db, alone.card_id)["lease_expires_at"] == \
        card_row(db, batched.card_id)["lease_expires_at"]


@BOTH
def test_threads_writing_at_once_each_get_their_own_answer(kb: Kanban) -> None:
    for n in range(24):
        kb.add_card(NewCard(f"card {n}"))
    claimed = kb.claim(24, lease_s=30)
    gc = committer(kb)
    answers: dict[int, object] = {}

    def worker(claim: Claim, stale: bool) -> None:
        token = "f" * 32 if stale else claim.claim_token
        try:
            answers[claim.card_id] = gc.write(Completion(claim.card_id, token, "ok", "w"))
        except LeaseLost as exc:
            answers[claim.card_id] = exc

    threads = [threading.Thread(target=worker, args=(c, n % 3 == 0))
               for n, c in enumerate(claimed)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, c in enumerate(claimed):
        stale = n % 3 == 0
        assert isinstance(answers[c.card_id], LeaseLost) == stale
        assert kb.card(c.card_id).status == ("running" if stale else "done")
    assert 1 <= gc.batches <= len(claimed)


class FailingCommits(SQLiteDatabase):
    """A store whose next `failures` write transactions fail at their end (rolled back),
    `in_doubt` as when the connection drops while committing."""

    failures = 0
    in_doubt = False

    @contextmanager
    def write(self) -> Iterator[Conn]:
        with super().write() as conn:
            yield conn
            if self.failures:
                self.failures -= 1
                raise TransientDatabaseError("connection lost at COMMIT", in_doubt=self.in_doubt)


@pytest.fixture
def failing(tmp_path: Path, sqlite_template: Path) -> Iterator[FailingCommits]:
    shutil.copyfile(sqlite_template, tmp_path / "kanban.db")
    db = FailingCommits(tmp_path / "kanban.db")
    yield db
    db.dispose()


def test_a_commit_in_doubt_acknowledges_nothing(failing: FailingCommits) -> None:
    kb = Kanban(failing)
    for n in range(3):
        kb.add_card(NewCard(f"card {n}"))
    claimed = kb.claim(3, lease_s=30)
    failing.failures, failing.in_doubt = 1, True
    tickets = committer(kb).write_all([finish(c) for c in claimed])
    # not retried one by one: the batch may have landed, and a retry would be refused
    assert all(isinstance(t.exception(), TransientDatabaseError) for t in tickets)
    assert {kb.card(c.card_id).status for c in claimed} == {"running"}


def test_a_failed_batch_is_retried_write_by_write(failing: FailingCommits) -> None:
    kb = Kanban(failing)
    for n in range(3):
        kb.add_card(NewCard(f"card {n}"))
    claimed = kb.claim(3, lease_s=30)
    failing.failures, failing.in_doubt = 2, False  # the batch, then the first write alone
    tickets = committer(kb).write_all([finish(c) for c in claimed])
    assert isinstance(tickets[0].exception(), TransientDatabaseError)
    assert [t.result() for t in tickets[1:]] == [None, None]
    assert [kb.card(c.card_id).status for c in claimed] == ["running", "done", "done"]


@BOTH
def test_a_heartbeat_stores_fresh_activity_in_the_same_commit(kb: Kanban, db: Database,
                                                              clock: FakeClock) -> None:
    kb.add_card(NewCard("watched"))
    (claim,) = kb.claim(1, lease_s=30)
    scope = WorkerScope(kb, "default", claim.card_id, claim.claim_token, claim.run_id,
                        lease_s=30)
    activity = Activity(max_turns=5)
    activity.model_call(1, "scripted:x")
    beat = HeartbeatThread(scope, activity=activity)
    clock.advance(10)
    beat._renew()
    row, (run,) = card_row(db, claim.card_id), runs_of(db, claim.card_id)
    assert row["lease_expires_at"] == clock.now + timedelta(seconds=30) == scope.lease_until
    assert json.loads(run["activity"])["phase"] == "model"
    hand_back(kb, claim.card_id)  # the card is taken from this worker: both writes refused
    activity.tool_started("terminal")
    with pytest.raises(LeaseLost):
        beat._renew()
    assert json.loads(runs_of(db, claim.card_id)[0]["activity"])["phase"] == "model"
