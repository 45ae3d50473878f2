"""`kanban stats`: counts, queue age, throughput and failure rate by window, tokens, cost."""

from __future__ import annotations

import pytest

from kanban import claims
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import STORES, FakeClock, claim_one, fail

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def spend(kb: Kanban, card_id: int, model: str, tokens: tuple[int, int, int],
          cost: float | None = None) -> None:
    claim = claim_one(kb, card_id)
    with kb.db.write() as conn:
        claims.record_usage(conn, claim.run_id, card_id, model, input_tokens=tokens[0],
                            output_tokens=tokens[1], cached_tokens=tokens[2], now=kb.clock(),
                            cost=cost)


def test_stats_over_time(kb: Kanban, db: Database, clock: FakeClock) -> None:
    kb.create_board("ops")
    old = kb.add_card(NewCard("old", profile="writer"))
    spend(kb, old.id, "openai:a", (100, 10, 50), cost=0.5)
    kb.complete(old.id, "done long ago")
    clock.advance(2 * 86400)
    failed = kb.add_card(NewCard("bad"))
    spend(kb, failed.id, "anthropic:b", (1000, 20, 0))
    fail(kb, failed.id)
    clock.advance(7200)  # out of the last hour, inside the last day
    recent = kb.add_card(NewCard("recent"))
    spend(kb, recent.id, "openai:a", (10, 1, 5), cost=0.25)
    kb.complete(recent.id, "ok")
    waiting = kb.add_card(NewCard("waiting", board="ops"))
    clock.advance(90)
    kb.add_card(NewCard("newer"))
    kb.archive(old.id)  # archived cards leave the counts, not the history

    s = kb.stats()
    assert s.by_state["done"] == 1 and s.by_state["failed"] == 1 and s.by_state["ready"] == 2
    assert s.by_board == {"default": {"done": 1, "failed": 1, "ready": 1},
                          "ops": {"ready": 1}}
    assert s.by_profile == {"default": {"done": 1, "failed": 1, "ready": 2}}
    assert s.oldest_ready_age_s == 90
    hour, day = s.windows["hour"], s.windows["day"]
    assert (hour.done, hour.failed, hour.failure_rate) == (1, 0, 0.0)
    assert hour.spend.tokens == {"input": 10, "output": 1, "cached": 5}
    assert (day.done, day.failed, day.failure_rate) == (1, 1, 0.5)
    assert day.spend.tokens == {"input": 1010, "output": 21, "cached": 5}
    assert (day.spend.cost, day.spend.unpriced) == (0.25, 1)  # anthropic:b has no price
    assert s.spend.tokens == {"input": 1110, "output": 31, "cached": 55}
    assert (s.spend.cost, s.spend.unpriced) == (0.75, 1)
    assert s.by_model["openai:a"] == {"calls": 2, "input": 110, "output": 11, "cached": 55,
                                      "cost": 0.75, "unpriced_calls": 0}
    assert s.by_model["anthropic:b"]["unpriced_calls"] == 1
    assert kb.stats(board="ops").by_state["ready"] == 1
    assert kb.stats(board="ops").oldest_ready_age_s == 90
    assert kb.stats(board="ops").spend.tokens["input"] == 0
    assert waiting.id  # used above through the board filter
