"""Random walks over the board API, checked step by step against a small reference model."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kanban.cards import NewCard
from kanban.errors import DependencyError, InvalidTransition, LeaseLost
from kanban.records import Claim
from kanban.service import Kanban
from kanban.states import ALLOWED, Action, CardStatus, Outcome
from tests.support.db import (
    LEASE_S,
    FakeClock,
    copy_sqlite,
    requeue,
    worker,
)

S = CardStatus
LINKABLE = {S.TODO, S.READY, S.BLOCKED}
picks = st.integers(min_value=0, max_value=1_000)


@dataclass
class ModelCard:
    """What the reference model knows of one card."""

    id: int
    deps: set[int]
    priority: int
    max_attempts: int
    status: S
    run_after: datetime
    attempt: int = 0
    retry_base: int = 0
    claim: Claim | None = None
    lost_claims: list[Claim] = field(default_factory=list)
    completions: int = 0  # running → done: each closes a run as completed
    blocked_by: int | None = None  # the failed or cancelled dependency that blocked it
    cancel_on_failure: bool = False  # on_dependency_failure = "cancel"


class BoardMachine(RuleBasedStateMachine):
    template: Path  # set by the module's fixture

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="kanban-sm-"))
        # A copy of one migrated file: migrating afresh for every example would dominate.
        self.db = copy_sqlite(self.template, self.folder / "kanban.db")
        self.clock = FakeClock()
        self.kb = Kanban(self.db, clock=self.clock)
        self.cards: dict[int, ModelCard] = {}
        self.replayed: dict[int, str] = {}
        self.replayed_to = 0

    def teardown(self) -> None:
        self.db.dispose()
        shutil.rmtree(self.folder, ignore_errors=True)

    # helpers

    def pick(self, n: int, statuses: set[S] | None = None) -> ModelCard | None:
        pool = [c for c in self.cards.values() if statuses is None or c.status in statuses]
        return pool[n % len(pool)] if pool else None

    def deps_done(self, card: ModelCard) -> bool:
        return all(self.cards[d].status == S.DONE for d in card.deps)

    def reaches(self, start: int, goal: int) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(self.cards[node].deps)
        return False

    def leave(self, card: ModelCard, to: S) -> None:
        """The model's side of a transition out of `card.status`."""
        if card.status == S.RUNNING and card.claim is not None:
            card.lost_claims.append(card.claim)
            card.claim = None
        if to == S.DONE and card.status == S.RUNNING:
            card.completions += 1
        card.status, card.blocked_by = to, None
        if to in (S.FAILED, S.CANCELLED):
            self.dependency_ended(card)
        if to == S.DONE:
            for other in self.cards.values():
                if card.id in other.deps and other.status == S.TODO and self.deps_done(other):
                    other.status, other.run_after = S.READY, self.clock()

    def dependency_ended(self, card: ModelCard) -> None:
        """Its waiting dependents are blocked naming it, or cancelled (and so on, by each
        one's own policy)."""
        ended = [card]
        while ended:
            gone = ended.pop(0)
            for other in self.cards.values():
                if gone.id in other.deps and other.status in (S.TODO, S.READY):
                    if other.cancel_on_failure:
                        other.status, other.blocked_by = S.CANCELLED, None
                        ended.append(other)
                    else:
                        other.status, other.blocked_by = S.BLOCKED, gone.id

    def release(self, card: ModelCard) -> None:
        """Retried or done: dependents it had blocked wait for it again."""
        for other in self.cards.values():
            if other.blocked_by == card.id and other.status == S.BLOCKED:
                other.status, other.blocked_by = S.TODO, None

    def block_if_dependency_ended(self, card: ModelCard) -> None:
        """Back in todo while a dependency is failed or cancelled: blocked, naming it."""
        ended = sorted(d for d in card.deps if self.cards[d].status in (S.FAILED, S.CANCELLED))
        if card.status == S.TODO and ended:
            card.status, card.blocked_by = S.BLOCKED, ended[0]

    def try_action(self, action: Action, card: ModelCard, call: Callable[[], object]) -> bool:
        """Run `call`; it must fail exactly when the state machine forbids `action`."""
        allowed = card.status in ALLOWED[action]
        if allowed:
            call()
        else:
            with pytest.raises(InvalidTransition):
                call()
        return allowed

    # rules

    @initialize()
    def two_cards(self) -> None:
        for _ in range(2):
            self.add(priority=0, dep_picks=[], max_attempts=1)

    @rule(priority=st.integers(0, 2), dep_picks=st.lists(picks, max_size=3),
          max_attempts=st.integers(1, 2), cancel=st.booleans())
    def add(self, priority: int, dep_picks: list[int], max_attempts: int,
            cancel: bool = False) -> None:
        ids = sorted(self.cards)
        deps = {ids[n % len(ids)] for n in dep_picks} if ids else set()
        created = self.kb.add_card(NewCard("card", priority=priority, depends_on=sorted(deps),
                                           max_attempts=max_attempts,
                                           on_dependency_failure="cancel" if cancel else None))
        card = ModelCard(created.id, deps, priority, max_attempts, S.READY, self.clock(),
                         cancel_on_failure=cancel)
        card.status = S.READY if self.deps_done(card) else S.TODO
        self.block_if_dependency_ended(card)
        self.cards[card.id] = card
        assert created.status == card.status

    @rule(a=picks, b=picks)
    def link(self, a: int, b: int) -> None:
        card, dep = self.pick(a), self.pick(b)
        assert card is not None and dep is not None
        refused = (card.id == dep.id or self.reaches(dep.id, card.id)
                   or card.status not in LINKABLE)
        if refused:
            with pytest.raises(DependencyError):
                self.kb.link(card.id, dep.id)
            return
        is_new = dep.id not in card.deps
        assert self.kb.link(card.id, dep.id) == is_new
        card.deps.add(dep.id)
        if is_new and card.status == S.READY and dep.status != S.DONE:
            card.status = S.TODO
        if is_new and card.status == S.TODO and dep.status in (S.FAILED, S.CANCELLED):
            card.status, card.blocked_by = S.BLOCKED, dep.id

    @rule()
    def claim(self) -> None:
        now = self.clock()
        ready = [c for c in self.cards.values() if c.status == S.READY and c.run_after <= now]
        claims = self.kb.claim(1, lease_s=LEASE_S)
        if not ready:
            assert claims == []
            return
        card = min(ready, key=lambda c: (-c.priority, c.id))
        (claim,) = claims
        card.attempt += 1
        assert (claim.card_id, claim.attempt) == (card.id, card.attempt)
        card.status, card.claim = S.RUNNING, claim

    def running(self) -> bool:
        return any(c.status == S.RUNNING for c in self.cards.values())

    def lost(self) -> bool:
        return any(c.lost_claims for c in self.cards.values())

    def pick_lost(self, n: int) -> tuple[ModelCard, Claim]:
        pool = [(c, claim) for c in self.cards.values() for claim in c.lost_claims]
        return pool[n % len(pool)]

    @precondition(running)
    @rule(n=picks)
    def heartbeat(self, n: int) -> None:
        card = self.pick(n, {S.RUNNING})
        assert card is not None and card.claim is not None
        self.clock.advance(1)
        until = self.kb.heartbeat(card.id, card.claim.claim_token, run_id=card.claim.run_id,
                                  lease_s=LEASE_S, note="working")
        assert until == self.clock() + timedelta(seconds=LEASE_S)

    @precondition(running)
    @rule(n=picks)
    def complete_by_worker(self, n: int) -> None:
        card = self.pick(n, {S.RUNNING})
        assert card is not None and card.claim is not None
        self.kb.complete(card.id, "result", actor=worker(card.claim))
        self.leave(card, S.DONE)

    @precondition(lost)
    @rule(n=picks, write=st.sampled_from(["heartbeat", "complete", "block"]))
    def write_with_a_lost_lease(self, n: int, write: str) -> None:
        card, claim = self.pick_lost(n)
        with pytest.raises(LeaseLost):
            if write == "heartbeat":
                self.kb.heartbeat(card.id, claim.claim_token, run_id=claim.run_id,
                                  lease_s=LEASE_S, note="late")
            elif write == "complete":
                self.kb.complete(card.id, "late", actor=worker(claim))
            else:
                self.kb.block(card.id, "late", actor=worker(claim))

    @rule(n=picks)
    def complete_by_hand(self, n: int) -> None:
        card = self.pick(n)
        assert card is not None
        if self.try_action(Action.COMPLETE, card, lambda: self.kb.complete(card.id, "by hand")):
            self.leave(card, S.DONE)

    @rule(n=picks)
    def block(self, n: int) -> None:
        card = self.pick(n)
        assert card is not None
        if self.try_action(Action.BLOCK, card, lambda: self.kb.block(card.id, "help")):
            self.leave(card, S.BLOCKED)

    @rule(n=picks)
    def unblock(self, n: int) -> None:
        card = self.pick(n)
        assert card is not None
        if self.try_action(Action.UNBLOCK, card, lambda: self.kb.unblock(card.id, "go on")):
            self.leave(card, S.READY if self.deps_done(card) else S.TODO)
            card.run_after = self.clock()
            self.block_if_dependency_ended(card)

    @rule(n=picks)
    def cancel(self, n: int) -> None:
        card = self.pick(n)
        assert card is not None
        if self.try_action(Action.CANCEL, card, lambda: self.kb.cancel(card.id)):
            self.leave(card, S.CANCELLED)

    @rule(n=picks)
    def retry(self, n: int) -> None:
        card = self.pick(n)
        assert card is not None
        if not self.try_action(Action.RETRY, card, lambda: self.kb.retry(card.id)):
            return
        was_done = card.status == S.DONE
        self.leave(card, S.READY if self.deps_done(card) else S.TODO)
        if not was_done:
            self.release(card)
        self.block_if_dependency_ended(card)
        card.run_after, card.retry_base = self.clock(), card.attempt
        if was_done:  # a redone dependency: its ready dependents wait for it again
            for other in self.cards.values():
                if card.id in other.deps and other.status == S.READY:
                    other.status = S.TODO

    @precondition(running)
    @rule(n=picks, delay=st.sampled_from([0.0, 5.0]))
    def expire_lease_and_requeue(self, n: int, delay: float) -> None:
        card = self.pick(n, {S.RUNNING})
        assert card is not None
        self.clock.advance(LEASE_S + 1)
        after = requeue(self.kb, card.id, outcome=Outcome.LEASE_LOST, delay_s=delay)
        exhausted = card.attempt - card.retry_base >= card.max_attempts
        # back to todo if a dependency was redone while it ran
        self.leave(card, S.FAILED if exhausted else S.READY if self.deps_done(card) else S.TODO)
        if not exhausted:
            self.block_if_dependency_ended(card)
            card.run_after = self.clock() + timedelta(seconds=delay)
        assert after.status == card.status

    @rule(seconds=st.sampled_from([1, 5]))
    def advance_clock(self, seconds: int) -> None:
        self.clock.advance(seconds)

    # invariants: one read snapshot per step, in plain SQL, keeps the walk fast

    @invariant()
    def the_store_agrees_with_the_model(self) -> None:
        with self.db.read() as conn:
            cards = {row[0]: row for row in conn.all(
                "SELECT id, status, claim_token, lease_expires_at FROM card")}
            runs = conn.all("SELECT card_id, claim_token, finished_at, outcome FROM run")
            edges = set(conn.all("SELECT card_id, depends_on_id FROM dependency"))
            events = conn.all(
                "SELECT id, card_id, kind, data FROM event WHERE id > ? AND card_id IS NOT NULL"
                " ORDER BY id", (self.replayed_to,))
        status = {card_id: row[1] for card_id, row in cards.items()}
        assert status == {c.id: c.status for c in self.cards.values()}
        assert edges == {(c.id, d) for c in self.cards.values() for d in c.deps}
        check_runs_and_leases(cards, runs, self.cards)
        for card_id, dep_id in edges:
            if status[card_id] == S.READY:
                assert status[dep_id] == S.DONE, f"#{card_id} is ready, #{dep_id} is not done"
        self.replay(events)
        assert self.replayed == status

    def replay(self, events: list[Any]) -> None:
        """Replaying each card's from/to pairs since its creation reaches its status."""
        for event_id, card_id, kind, raw in events:
            data = json.loads(raw)
            if kind == "created":
                assert card_id not in self.replayed
                self.replayed[card_id] = data["to"]
            elif "from" in data:
                assert data["from"] == self.replayed[card_id], (card_id, kind, data)
                self.replayed[card_id] = data["to"]
            self.replayed_to = event_id


def check_runs_and_leases(cards: dict[int, Any], runs: list[Any],
                          model: dict[int, ModelCard]) -> None:
    """At most one open run per card; running ⇔ a lease, a token and that open run."""
    open_runs = {}
    for card_id, token, finished_at, _ in runs:
        if finished_at is None:
            assert card_id not in open_runs, f"#{card_id} has two unfinished runs"
            open_runs[card_id] = token
    completed = Counter(run[0] for run in runs if run[3] == Outcome.COMPLETED)
    for card_id, status, token, lease_expires_at in cards.values():
        assert completed[card_id] == model[card_id].completions
        if status == S.RUNNING:
            assert token and open_runs.get(card_id) == token and lease_expires_at is not None
        else:
            assert card_id not in open_runs
            assert token is None and lease_expires_at is None


@pytest.fixture(autouse=True, scope="module")
def _template(sqlite_template: Path) -> None:
    BoardMachine.template = sqlite_template


BoardMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBoard = BoardMachine.TestCase
