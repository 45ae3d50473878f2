"""Claims, leases, heartbeats, usage and fencing: the dispatcher's and workers' side."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from kanban import claims, comments, transitions
from kanban.cards import NewCard
from kanban.errors import LeaseLost
from kanban.records import Claim
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import CardStatus, Outcome
from tests.support.db import (
    FakeClock,
    card_row,
    claim_one,
    event_count,
    events_of,
    fail,
    requeue,
    runs_of,
    status_events,
    worker,
)

S = CardStatus


# Claim


def test_claim_writes_the_run_and_the_event(kb: Kanban, db: Database, clock: FakeClock) -> None:
    card = kb.add_card(NewCard("task", timeout_s=60, profile="coder"))
    (claim,) = kb.claim(5, lease_s=30, dispatcher_id=7, host="box")
    assert re.fullmatch(r"[0-9a-f]{32}", claim.claim_token)
    assert (claim.card_id, claim.attempt, claim.profile, claim.timeout_s) == (card.id, 1, "coder",
                                                                              60)
    assert claim.lease_expires_at == clock() + timedelta(seconds=30)
    row = card_row(db, card.id)
    assert row["status"] == S.RUNNING and row["claim_token"] == claim.claim_token
    assert row["lease_expires_at"] == claim.lease_expires_at and row["started_at"] == clock()
    (run,) = runs_of(db, card.id)
    assert (run["id"], run["attempt"], run["claim_token"]) == (claim.run_id, 1, claim.claim_token)
    assert (run["dispatcher_id"], run["host"], run["finished_at"]) == (7, "box", None)
    (move,) = status_events(db, card.id)
    assert (move["kind"], move["run_id"], move["actor"]) == ("claimed", run["id"], "dispatcher:7")
    assert (move["data"]["from"], move["data"]["to"], move["data"]["attempt"]) == (
        "ready", "running", 1)


def test_claim_tokens_differ_between_attempts(kb: Kanban) -> None:
    card = kb.add_card(NewCard("task"))
    first = claim_one(kb, card.id)
    requeue(kb, card.id)
    second = claim_one(kb, card.id)
    assert first.claim_token != second.claim_token and second.attempt == 2


def test_claim_honours_priority_then_id(kb: Kanban) -> None:
    low = kb.add_card(NewCard("low", priority=-5))
    first_high = kb.add_card(NewCard("high", priority=10))
    normal = kb.add_card(NewCard("normal"))
    second_high = kb.add_card(NewCard("high too", priority=10))
    order = [claim_one(kb).card_id for _ in range(4)]
    assert order == [first_high.id, second_high.id, normal.id, low.id]


def test_claim_takes_at_most_n_best_cards(kb: Kanban) -> None:
    ids = [kb.add_card(NewCard(f"card {p}", priority=p)).id for p in range(5)]
    taken = kb.claim(2, lease_s=30)
    assert sorted(c.card_id for c in taken) == sorted(ids[-2:])
    assert kb.claim(0, lease_s=30) == []


def test_claim_waits_for_run_after(kb: Kanban, db: Database, clock: FakeClock) -> None:
    card = kb.add_card(NewCard("later"))
    with db.write() as conn:
        conn.execute("UPDATE card SET run_after = :at WHERE id = :id",
                     {"at": clock() + timedelta(seconds=10), "id": card.id})
    assert kb.claim(1, lease_s=30) == []
    clock.advance(10)
    assert claim_one(kb).card_id == card.id


def test_global_pause_stops_claims(kb: Kanban) -> None:
    card = kb.add_card(NewCard("task"))
    kb.set_paused(True)
    assert kb.pause_state("default").global_paused
    assert kb.claim(1, lease_s=30) == []
    kb.set_paused(False)
    assert claim_one(kb).card_id == card.id


def test_board_pause_stops_claims_on_that_board_only(kb: Kanban) -> None:
    kb.create_board("other")
    paused = kb.add_card(NewCard("paused board", priority=5))
    open_card = kb.add_card(NewCard("open board", board="other"))
    kb.set_paused(True, board="default")
    state = kb.pause_state("default")
    assert state.board_paused and not state.global_paused and state.paused
    assert [c.card_id for c in kb.claim(5, lease_s=30)] == [open_card.id]
    kb.set_paused(False, board="default")
    assert claim_one(kb).card_id == paused.id


def test_board_filter(kb: Kanban) -> None:
    kb.create_board("other")
    kb.add_card(NewCard("default board", priority=9))
    other = kb.add_card(NewCard("other board", board="other"))
    assert [c.card_id for c in kb.claim(5, lease_s=30, flt=claims.ClaimFilter("other"))] == [
        other.id]


def test_exclude_profiles(kb: Kanban) -> None:
    coder = kb.add_card(NewCard("code", profile="coder", priority=9))
    writer = kb.add_card(NewCard("write", profile="writer", priority=8))
    plain = kb.add_card(NewCard("plain"))
    flt = claims.ClaimFilter(exclude_profiles=["coder", "writer"])
    assert [c.card_id for c in kb.claim(5, lease_s=30, flt=flt)] == [plain.id]
    flt = claims.ClaimFilter(exclude_profiles=["writer"])
    assert [c.card_id for c in kb.claim(5, lease_s=30, flt=flt)] == [coder.id]
    assert claim_one(kb).card_id == writer.id


# Heartbeat, usage, transcript


def test_heartbeat_extends_the_lease_and_records_progress(
    kb: Kanban, db: Database, clock: FakeClock
) -> None:
    card = kb.add_card(NewCard("task"))
    claim = claim_one(kb, card.id)
    clock.advance(20)
    until = kb.heartbeat(card.id, claim.claim_token, run_id=claim.run_id, lease_s=30)
    assert until == clock() + timedelta(seconds=30) == card_row(db, card.id)["lease_expires_at"]
    (run,) = runs_of(db, card.id)
    assert run["heartbeat_at"] == clock() and run["progress"] is None
    assert [e["kind"] for e in events_of(db, card.id)] == ["created", "claimed"]

    clock.advance(10)
    kb.heartbeat(card.id, claim.claim_token, run_id=claim.run_id, lease_s=30,
                 note="read 3 of 5 files")
    (run,) = runs_of(db, card.id)
    assert run["progress"] == "read 3 of 5 files" and run["heartbeat_at"] == clock()
    progress = events_of(db, card.id)[-1]
    assert progress["kind"] == "progress" and progress["data"]["note"] == "read 3 of 5 files"
    assert [lease.card_id for lease in _leases(db)] == [card.id]
    assert _leases(db)[0].lease_expires_at == clock() + timedelta(seconds=30)


def _leases(db: Database) -> list[claims.Lease]:
    with db.read() as conn:
        return claims.running_leases(conn)


def test_running_leases_pair_each_card_with_its_current_run(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("task"))
    claim_one(kb, card.id)
    requeue(kb, card.id)
    claim = claim_one(kb, card.id)
    (lease,) = _leases(db)
    assert (lease.card_id, lease.claim_token, lease.run_id) == (card.id, claim.claim_token,
                                                               claim.run_id)


def test_record_usage_accumulates_on_run_and_card(kb: Kanban, db: Database,
                                                  clock: FakeClock) -> None:
    card = kb.add_card(NewCard("task"))
    claim = claim_one(kb, card.id)
    for tokens in ((100, 20, 0), (50, 5, 40)):
        with db.write() as conn:
            claims.record_usage(conn, claim.run_id, card.id, "openai:gpt-4o-mini",
                                input_tokens=tokens[0], output_tokens=tokens[1],
                                cached_tokens=tokens[2], now=clock())
    (run,) = runs_of(db, card.id)
    assert (run["input_tokens"], run["output_tokens"], run["cached_tokens"]) == (150, 25, 40)
    after = kb.card(card.id)
    assert (after.input_tokens, after.output_tokens, after.cached_tokens) == (150, 25, 40)
    # A second run adds to the card's totals, not to the first run's.
    requeue(kb, card.id)
    second = claim_one(kb, card.id)
    with db.write() as conn:
        claims.record_usage(conn, second.run_id, card.id, "m", input_tokens=1, output_tokens=1,
                            cached_tokens=1, now=clock())
    assert kb.card(card.id).input_tokens == 151
    assert [r["input_tokens"] for r in runs_of(db, card.id)] == [150, 1]


def test_append_message_keeps_the_transcript_in_order(kb: Kanban, db: Database,
                                                      clock: FakeClock) -> None:
    card = kb.add_card(NewCard("task"))
    claim = claim_one(kb, card.id)
    call = [{"id": "c1", "name": "kanban_complete", "arguments": "{}"}]
    with db.write() as conn:
        claims.append_message(conn, claim.run_id, 1, {"role": "user", "content": "go"}, now=clock())
        claims.append_message(conn, claim.run_id, 2, {"role": "assistant", "tool_calls": call},
                              now=clock())
    with db.read() as conn:
        ((run, messages),) = claims.run_transcript(conn, card.id)
    assert run.id == claim.run_id
    assert [(m.seq, m.role, m.content) for m in messages] == [(1, "user", "go"),
                                                              (2, "assistant", None)]
    assert messages[1].to_json()["tool_calls"] == call


# Fencing: a stale or foreign claim token changes nothing


def _stale(kb: Kanban, card_id: int) -> Claim:
    """A claim whose lease was lost: the card was requeued and claimed again."""
    old = claim_one(kb, card_id)
    requeue(kb, card_id)
    claim_one(kb, card_id)
    return old


def _foreign(kb: Kanban, card_id: int) -> Claim:
    """Another running card's valid claim."""
    claim_one(kb, card_id)
    other = kb.add_card(NewCard("another card"))
    return claim_one(kb, other.id)


FENCED_WRITES: dict[str, Callable[[Kanban, int, Claim], object]] = {
    "complete": lambda kb, cid, c: kb.complete(cid, "late result", actor=worker(c)),
    "block": lambda kb, cid, c: kb.block(cid, "stuck", actor=worker(c)),
    "heartbeat": lambda kb, cid, c: kb.heartbeat(cid, c.claim_token, run_id=c.run_id,
                                                 lease_s=30, note="still here"),
    "requeue": lambda kb, cid, c: requeue(kb, cid, actor=worker(c)),
    "fail": lambda kb, cid, c: fail(kb, cid, actor=worker(c)),
    "comment": lambda kb, cid, c: _fenced_comment(kb, cid, c),
}


def _fenced_comment(kb: Kanban, card_id: int, claim: Claim) -> int:
    """A worker's comment: lease check and insert in one transaction."""
    with kb.db.write() as conn:
        transitions.assert_lease(conn, card_id, claim.claim_token)
        return comments.add_comment(conn, card_id, "from the worker", author="card",
                                    now=kb.clock())


@pytest.mark.parametrize("write", list(FENCED_WRITES))
@pytest.mark.parametrize("token", ["stale", "foreign", "made-up"])
def test_fenced_write_with_a_lost_lease_raises_and_changes_nothing(
    kb: Kanban, db: Database, write: str, token: str
) -> None:
    card = kb.add_card(NewCard("task"))
    if token == "stale":
        claim = _stale(kb, card.id)
    elif token == "foreign":
        claim = _foreign(kb, card.id)
    else:
        real = claim_one(kb, card.id)
        claim = replace(real, claim_token="0" * 32)
    before = card_row(db, card.id), runs_of(db, card.id), event_count(db)
    with pytest.raises(LeaseLost, match=f"lease on #{card.id} was lost"):
        FENCED_WRITES[write](kb, card.id, claim)
    assert (card_row(db, card.id), runs_of(db, card.id), event_count(db)) == before
    assert kb.detail(card.id).comments == ()


@pytest.mark.parametrize("write", ["complete", "block", "heartbeat", "comment"])
def test_fenced_write_with_the_current_token_succeeds(kb: Kanban, write: str) -> None:
    card = kb.add_card(NewCard("task"))
    claim = claim_one(kb, card.id)
    FENCED_WRITES[write](kb, card.id, claim)


def test_a_worker_cannot_write_after_its_card_was_cancelled(kb: Kanban) -> None:
    card = kb.add_card(NewCard("task"))
    claim = claim_one(kb, card.id)
    kb.cancel(card.id)
    with pytest.raises(LeaseLost):
        kb.complete(card.id, "too late", actor=worker(claim))
    assert kb.card(card.id).status == S.CANCELLED and kb.card(card.id).result is None


def test_a_worker_completion_closes_its_run(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("task"))
    claim = claim_one(kb, card.id)
    done = kb.complete(card.id, "the answer", actor=worker(claim))
    assert done.status == S.DONE and done.result == "the answer"
    (run,) = runs_of(db, card.id)
    assert run["outcome"] == Outcome.COMPLETED and run["finished_at"] is not None
    assert status_events(db, card.id)[-1]["actor"] == f"card:#{card.id}"


def test_kanban_comment_is_fenced_by_the_claim_token(kb: Kanban) -> None:
    card = kb.add_card(NewCard("task"))
    claim = _stale(kb, card.id)
    with pytest.raises(LeaseLost):
        kb.comment(card.id, "late note", actor=worker(claim))


def test_a_claimed_batch_comes_back_in_queue_order(kb: Kanban) -> None:
    low = kb.add_card(NewCard("low", priority=0))
    high = kb.add_card(NewCard("high", priority=5))
    assert [c.card_id for c in kb.claim(2, lease_s=30)] == [high.id, low.id]
