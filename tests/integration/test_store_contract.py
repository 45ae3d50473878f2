"""One contract, every store: the board behaves the same on SQLite and on PostgreSQL.

PostgreSQL takes its own claim path (a MATERIALIZED CTE with FOR UPDATE SKIP LOCKED), so every
claim here exercises it; without a server on 127.0.0.1:5432 the postgres cases skip.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest

from kanban import transitions
from kanban.cards import NewCard
from kanban.claims import ClaimFilter, record_usage
from kanban.errors import DependencyError, LeaseLost
from kanban.run_activity import store_activity
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import CardStatus, Outcome
from kanban.transitions import Actor
from tests.support.db import (
    LEASE_S,
    STORES,
    FakeClock,
    claim_one,
    requeue,
    runs_of,
    status_events,
    worker,
)

S = CardStatus
pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def test_store_is_what_was_asked(db: Database, store: str) -> None:
    assert db.dialect == {"sqlite": "sqlite", "postgres": "postgresql"}[store]


def test_add_link_complete_promote(kb: Kanban, db: Database, clock: FakeClock) -> None:
    a, b = kb.add_card(NewCard("a")), kb.add_card(NewCard("b"))
    c = kb.add_card(NewCard("c", depends_on=[a.id, b.id]))
    assert (a.status, c.status) == (S.READY, S.TODO)
    assert c.created_at == clock() and c.run_after.tzinfo is not None
    with pytest.raises(DependencyError, match=rf"cycle: #{a.id} → #{c.id} → #{a.id}"):
        kb.link(a.id, c.id)

    claim = claim_one(kb, a.id)
    clock.advance(3)
    kb.complete(a.id, "a done", actor=worker(claim))
    assert kb.card(c.id).status == S.TODO
    kb.complete(b.id, "b done by hand")
    promoted = kb.card(c.id)
    assert promoted.status == S.READY and promoted.run_after == clock()
    assert [e["kind"] for e in status_events(db, c.id)] == ["promoted"]
    (run,) = runs_of(db, a.id)
    assert run["outcome"] == Outcome.COMPLETED and run["finished_at"] == clock()
    assert kb.detail(c.id).depends_on[0].result == "a done"


def test_claim_order_filters_and_run_after(kb: Kanban, clock: FakeClock) -> None:
    kb.create_board("other")
    low = kb.add_card(NewCard("low", priority=-1))
    high = kb.add_card(NewCard("high", priority=5))
    coder = kb.add_card(NewCard("coder", priority=9, profile="coder"))
    elsewhere = kb.add_card(NewCard("elsewhere", board="other", priority=1))
    normal = kb.add_card(NewCard("normal"))

    flt = ClaimFilter(board="default", exclude_profiles=["coder"])
    taken = kb.claim(2, lease_s=LEASE_S, flt=flt)
    assert sorted(c.card_id for c in taken) == sorted([high.id, normal.id])
    assert all(c.lease_expires_at == clock() + timedelta(seconds=LEASE_S) for c in taken)
    assert [c.card_id for c in kb.claim(5, lease_s=LEASE_S, flt=ClaimFilter("other"))] == [
        elsewhere.id]
    requeue(kb, high.id, delay_s=10)
    assert sorted(c.card_id for c in kb.claim(5, lease_s=LEASE_S)) == [low.id, coder.id]
    assert kb.claim(5, lease_s=LEASE_S) == []
    clock.advance(10)
    again = claim_one(kb, high.id)
    assert again.attempt == 2


def test_pause_is_read_inside_the_claim(kb: Kanban) -> None:
    kb.create_board("other")
    card = kb.add_card(NewCard("task"))
    other = kb.add_card(NewCard("other", board="other"))
    kb.set_paused(True)
    assert kb.claim(5, lease_s=LEASE_S) == []
    kb.set_paused(False)
    kb.set_paused(True, board="default")
    assert kb.pause_state("default").paused and not kb.pause_state("other").paused
    assert [c.card_id for c in kb.claim(5, lease_s=LEASE_S)] == [other.id]
    kb.set_paused(False, board="default")
    assert claim_one(kb).card_id == card.id


def test_heartbeat_fencing_and_usage(kb: Kanban, db: Database, clock: FakeClock) -> None:
    card = kb.add_card(NewCard("task", max_attempts=3))
    first = claim_one(kb, card.id)
    clock.advance(10)
    until = kb.heartbeat(card.id, first.claim_token, run_id=first.run_id, lease_s=LEASE_S,
                         note="halfway")
    assert until == clock() + timedelta(seconds=LEASE_S) == kb.card(card.id).lease_expires_at
    with db.write() as conn:
        record_usage(conn, first.run_id, card.id, "scripted:demo", input_tokens=10,
                     output_tokens=2, cached_tokens=1, now=clock())

    requeue(kb, card.id, outcome=Outcome.LEASE_LOST)
    second = claim_one(kb, card.id)
    for write in (
        lambda: kb.heartbeat(card.id, first.claim_token, run_id=first.run_id, lease_s=LEASE_S),
        lambda: kb.complete(card.id, "late", actor=worker(first)),
        lambda: kb.block(card.id, "late", actor=worker(first)),
    ):
        with pytest.raises(LeaseLost):
            write()
    assert kb.card(card.id).status == S.RUNNING
    kb.complete(card.id, "on time", actor=worker(second))
    done = kb.card(card.id)
    assert (done.status, done.result, done.input_tokens, done.attempt) == (S.DONE, "on time",
                                                                           10, 2)
    assert [r["outcome"] for r in runs_of(db, card.id)] == [Outcome.LEASE_LOST,
                                                            Outcome.COMPLETED]
    assert runs_of(db, card.id)[0]["progress"] == "halfway"


def test_live_activity_is_stored_only_under_the_claim(kb: Kanban, db: Database,
                                                     clock: FakeClock) -> None:
    card = kb.add_card(NewCard("task", max_attempts=3))
    first = claim_one(kb, card.id)
    store_activity(db, first.run_id, card.id, first.claim_token, {"phase": "model"},
                   now=clock())
    requeue(kb, card.id, outcome=Outcome.LEASE_LOST)
    second = claim_one(kb, card.id)
    for run_id, token in ((first.run_id, first.claim_token),  # a stale worker
                          (first.run_id, second.claim_token),  # the new claim, an old run
                          (second.run_id, first.claim_token)):  # the old claim, a new run
        with pytest.raises(LeaseLost):
            store_activity(db, run_id, card.id, token, {"phase": "forged"}, now=clock())
    store_activity(db, second.run_id, card.id, second.claim_token, {"phase": "tools"},
                   now=clock())
    assert [r["activity"] for r in runs_of(db, card.id)] == ['{"phase": "model"}',
                                                             '{"phase": "tools"}']


def test_attempts_run_out_and_retry_refills_them(kb: Kanban) -> None:
    card = kb.add_card(NewCard("flaky", max_attempts=1))
    claim_one(kb, card.id)
    assert requeue(kb, card.id).status == S.FAILED
    assert kb.retry(card.id).status == S.READY
    claim_one(kb, card.id)
    assert requeue(kb, card.id).status == S.FAILED
    kb.archive(card.id)
    assert kb.list_cards() == [] and len(kb.list_cards(include_archived=True)) == 1


def test_board_snapshot_counts(kb: Kanban) -> None:
    running = kb.add_card(NewCard("running"))
    claim = claim_one(kb, running.id)
    kb.add_card(NewCard("ready"))
    kb.heartbeat(running.id, claim.claim_token, run_id=claim.run_id, lease_s=LEASE_S,
                 note="busy")
    kb.block(kb.add_card(NewCard("blocked")).id, "needs a human")
    snapshot = kb.board_snapshot("default")
    assert {k: v for k, v in snapshot.counts.items() if v} == {"ready": 1, "running": 1,
                                                               "blocked": 1}
    (shown,) = snapshot.columns["running"]
    assert shown.progress == "busy"


def test_concurrent_claims_never_take_a_card_twice(db: Database, clock: FakeClock) -> None:
    kb = Kanban(db, clock=clock)
    ids = [kb.add_card(NewCard(f"card {i}", priority=i % 4)).id for i in range(40)]
    claimed: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def dispatcher() -> None:
        try:
            start.wait()
            while batch := kb.claim(3, lease_s=LEASE_S):
                claimed.extend(c.card_id for c in batch)
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=dispatcher) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert Counter(claimed) == Counter(ids)
    assert {c.status for c in kb.list_cards()} == {S.RUNNING}



def test_event_rows_are_the_same_text_on_every_store(kb: Kanban, db: Database) -> None:
    """The PostgreSQL hot path writes its events in SQL: the same bytes as the portable one."""
    first = kb.add_card(NewCard("first"))
    then = kb.add_card(NewCard("then", depends_on=[first.id]))
    claim = claim_one(kb, first.id)
    kb.heartbeat(first.id, claim.claim_token, run_id=claim.run_id, lease_s=LEASE_S,
                 note="half way")
    done = kb.complete(first.id, "all done", actor=worker(claim))
    assert done.status == S.DONE and done.result == "all done"
    with db.read() as conn:
        rows = conn.all("SELECT card_id, run_id, kind, actor, data FROM event "
                        "WHERE card_id IS NOT NULL AND kind != 'created' ORDER BY id")
    assert rows == [
        (first.id, claim.run_id, "claimed", "dispatcher",
         '{"attempt": 1, "from": "ready", "to": "running"}'),
        (first.id, claim.run_id, "progress", f"card:#{first.id}", '{"note": "half way"}'),
        (first.id, claim.run_id, "complete", f"card:#{first.id}",
         '{"from": "running", "implicit": false, "to": "done"}'),
        (then.id, None, "promoted", "system", '{"from": "todo", "to": "ready"}'),
    ]
    (run,) = runs_of(db, first.id)
    assert (run["outcome"], run["progress"]) == (Outcome.COMPLETED, "half way")


def test_hand_back_spends_no_attempt(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("restarted under", max_attempts=1))
    claim = claim_one(kb, card.id)
    with db.write() as conn:
        back = transitions.hand_back(conn, card.id, "rolling restart", now=kb.clock(),
                                     actor=Actor("dispatcher:1", claim.claim_token))
    assert back.status == S.READY and back.attempt - back.retry_base == 0
    again = claim_one(kb, card.id)
    assert (again.attempt, again.spent) == (2, 1)  # the second claim, its budget's first
    assert kb.complete(card.id, "done", actor=worker(again)).status == S.DONE
    assert [r["outcome"] for r in runs_of(db, card.id)] == [Outcome.HANDED_BACK,
                                                            Outcome.COMPLETED]
