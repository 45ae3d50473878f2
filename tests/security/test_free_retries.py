"""An attack on the attempt budget: a model whose commands can reach the database server
(network on) takes its connections, or locks what its worker writes, until the worker gives
up and exits for the database (74). Such an exit is the host's fault as far as the
dispatcher can tell, so the card goes back without spending an attempt; done again on every
run, the model would be run for ever at the user's expense. A card gets a few of those in a
row for free; then each spends an attempt, so the card ends failed after a bounded number
of runs.

The worker here is the dispatcher's own bookkeeping of an exit 74 with the line a cut-off
worker writes (tests/acceptance/test_postgres_cluster.py drives a real outage to it)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban import claims, control, transitions
from kanban.cards import NewCard
from kanban.claims import Claim
from kanban.dispatcher.local import LocalWorker
from kanban.dispatcher.loop import Dispatcher
from kanban.dispatcher.rescue import (
    ENDED,
    EXIT_INFRA,
    FORGIVEN_INFRA_EXITS,
    STALLED,
    rescue_leases,
    settle_exit,
    worker_log,
)
from kanban.service import Kanban
from kanban.state.config import Config
from kanban.states import Outcome
from tests.support.db import LEASE_S, FakeClock, claim_one, open_sqlite, runs_of

CUT_OFF = "kanban worker: the database stayed unreachable as the lease ran out (too many clients)"


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[Dispatcher]:
    db = open_sqlite(tmp_path / "kanban.db")
    kb = Kanban(db, clock=FakeClock())
    d = Dispatcher(kb, Config(), home=tmp_path, db_target=str(db.path))
    with kb.db.write() as conn:
        d.id = control.register_dispatcher(conn, host=d.instance.host, pid=d.instance.pid,
                                           now=kb.clock(), instance=d.instance.id,
                                           boot_id=d.instance.boot_id,
                                           booted_at=d.instance.booted_at)
    yield d
    db.dispose()


GO = {"role": "user", "content": "go"}  # the run's first message: its model is called


def _next_run(d: Dispatcher, card_id: int, message: dict[str, object] | None) -> Claim:
    """The card's next run (past any retry delay), with `message` stored in it if given."""
    d.kb.clock.advance(60)  # type: ignore[attr-defined]
    claim = claim_one(d.kb, card_id)
    if message is not None:
        with d.kb.db.write() as conn:
            claims.append_message(conn, claim.run_id, 1, message, now=d.kb.clock())
    return claim


def _run_until_cut_off(d: Dispatcher, card_id: int, *, acted: bool = True) -> None:
    """One run of the card whose worker exits for the database, after its model called a
    command (`acted`) or before it made any call."""
    claim = _next_run(d, card_id, {"role": "assistant", "tool_calls": [
        {"id": "c1", "name": "terminal", "arguments": '{"command": "take-them-all"}'}]}
        if acted else None)
    log = worker_log(d.home, card_id, claim.attempt)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(CUT_OFF + "\n")
    settle_exit(d, LocalWorker(claim, pid=1, profile="default", timeout_s=600), EXIT_INFRA)


def test_exits_for_the_database_cannot_keep_a_card_running_for_free(
        dispatcher: Dispatcher) -> None:
    attempts = 2
    card = dispatcher.kb.add_card(NewCard("hostile", max_attempts=attempts))
    runs = 0
    while dispatcher.kb.card(card.id).status != "failed":
        _run_until_cut_off(dispatcher, card.id)
        runs += 1
        assert runs <= 50, "the card is still being run for free"
    assert runs == attempts * (FORGIVEN_INFRA_EXITS + 1)
    outcomes = [r["outcome"] for r in runs_of(dispatcher.kb.db, card.id)]
    paid = [Outcome.HANDED_BACK] * FORGIVEN_INFRA_EXITS + [Outcome.CRASHED]
    assert outcomes == paid * attempts
    failed = dispatcher.kb.card(card.id)
    assert "too many clients" in (failed.error or "")
    assert "spends an attempt" in (failed.error or "")


def test_a_real_outage_now_and_then_still_spends_nothing(dispatcher: Dispatcher) -> None:
    """Exits for the database apart from each other (a run that ended otherwise between)
    are each forgiven: the streak is per card and in a row."""
    card = dispatcher.kb.add_card(NewCard("unlucky", max_attempts=1))
    for _ in range(FORGIVEN_INFRA_EXITS):
        _run_until_cut_off(dispatcher, card.id)
    dispatcher.kb.clock.advance(60)  # type: ignore[attr-defined]
    claim = claim_one(dispatcher.kb, card.id)  # a run a dispatcher shut down
    with dispatcher.kb.db.write() as conn:
        transitions.hand_back(conn, card.id, "dispatcher shutting down",
                              now=dispatcher.kb.clock(), actor=dispatcher.actor(claim.claim_token))
    for _ in range(FORGIVEN_INFRA_EXITS):
        _run_until_cut_off(dispatcher, card.id)
    back = dispatcher.kb.card(card.id)
    assert back.status == "ready" and back.attempt - back.retry_base == 0


def test_a_worker_the_database_failed_before_its_model_acted_spends_nothing(
        dispatcher: Dispatcher) -> None:
    """A server out of connections from the start (its workers never reach the model) is
    an outage however long it lasts: the breaker bounds it, not the card's attempts. Such
    runs neither count nor break a streak."""
    card = dispatcher.kb.add_card(NewCard("patient", max_attempts=1))
    for _ in range(FORGIVEN_INFRA_EXITS + 3):
        _run_until_cut_off(dispatcher, card.id, acted=False)
    for _ in range(FORGIVEN_INFRA_EXITS):
        _run_until_cut_off(dispatcher, card.id)
    _run_until_cut_off(dispatcher, card.id, acted=False)
    back = dispatcher.kb.card(card.id)
    assert back.status == "ready" and back.attempt - back.retry_base == 0
    _run_until_cut_off(dispatcher, card.id)  # the fourth that acted, in a row
    assert dispatcher.kb.card(card.id).status == "failed"


def _run_until_lapsed(d: Dispatcher, card_id: int, *, acted: bool) -> None:
    """One run of the card whose worker (a real process of the dispatcher's) stops
    heartbeating, after its model was called (`acted`) or before (stuck connecting to a
    server out of connections, or starved of CPU), until the dispatcher stops it."""
    claim = _next_run(d, card_id, GO if acted else None)
    stuck = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        d.workers.add(LocalWorker(claim, pid=stuck.pid, profile="default", timeout_s=600))
        d.kb.clock.advance(LEASE_S + 5)  # type: ignore[attr-defined]
        rescue_leases(d)
        assert stuck.wait(timeout=30) == -9  # stopped before its card was given back
    finally:
        stuck.kill()
        stuck.wait()
        d.workers.pop(stuck.pid)


def test_a_worker_stalled_before_its_model_spends_no_attempt(dispatcher: Dispatcher) -> None:
    """A lapsed lease whose run has no message yet is the host's fault (the CI failure of
    test_pg_connection_limit: a worker starved past its 4 s lease while it waited for a
    connection failed a card with one attempt)."""
    card = dispatcher.kb.add_card(NewCard("stalled", max_attempts=1))
    _run_until_lapsed(dispatcher, card.id, acted=False)
    back = dispatcher.kb.card(card.id)
    assert back.status == "ready" and back.attempt - back.retry_base == 0
    run = runs_of(dispatcher.kb.db, card.id)[-1]
    assert run["outcome"] == Outcome.HANDED_BACK and STALLED in (run["error"] or "")


def test_a_worker_that_always_stalls_still_ends_its_card(dispatcher: Dispatcher) -> None:
    card = dispatcher.kb.add_card(NewCard("never starts", max_attempts=1))
    for _ in range(FORGIVEN_INFRA_EXITS):
        _run_until_lapsed(dispatcher, card.id, acted=False)
    assert dispatcher.kb.card(card.id).status == "ready"
    _run_until_lapsed(dispatcher, card.id, acted=False)
    failed = dispatcher.kb.card(card.id)
    assert failed.status == "failed" and "lease expired" in (failed.error or "")


def test_a_lapse_after_the_model_had_its_turn_spends_an_attempt(
        dispatcher: Dispatcher) -> None:
    card = dispatcher.kb.add_card(NewCard("slow", max_attempts=1))
    _run_until_lapsed(dispatcher, card.id, acted=True)
    assert dispatcher.kb.card(card.id).status == "failed"
    assert runs_of(dispatcher.kb.db, card.id)[-1]["outcome"] == Outcome.LEASE_LOST


def _run_until_killed(d: Dispatcher, card_id: int, *, acted: bool) -> None:
    """One run whose worker was killed (SIGKILL: the OOM killer's way), after its model was
    called or before."""
    claim = _next_run(d, card_id, GO if acted else None)
    settle_exit(d, LocalWorker(claim, pid=1, profile="default", timeout_s=600), -9)


def test_a_worker_killed_before_its_model_was_called_spends_no_attempt(
        dispatcher: Dispatcher) -> None:
    """A fresh worker is the OOM killer's likely pick on a host short of memory; its card
    did nothing yet. Three in a row at most: a worker that always dies there still ends
    its card."""
    card = dispatcher.kb.add_card(NewCard("unlucky start", max_attempts=1))
    for _ in range(FORGIVEN_INFRA_EXITS):
        _run_until_killed(dispatcher, card.id, acted=False)
        back = dispatcher.kb.card(card.id)
        assert back.status == "ready" and back.attempt - back.retry_base == 0
    run = runs_of(dispatcher.kb.db, card.id)[-1]
    assert run["outcome"] == Outcome.HANDED_BACK and ENDED in (run["error"] or "")
    assert "code -9" in (run["error"] or "")
    _run_until_killed(dispatcher, card.id, acted=False)
    assert dispatcher.kb.card(card.id).status == "failed"


def test_a_worker_killed_after_its_model_was_called_spends_an_attempt(
        dispatcher: Dispatcher) -> None:
    card = dispatcher.kb.add_card(NewCard("killed at work", max_attempts=1))
    _run_until_killed(dispatcher, card.id, acted=True)
    assert dispatcher.kb.card(card.id).status == "failed"
    assert runs_of(dispatcher.kb.db, card.id)[-1]["outcome"] == Outcome.CRASHED
