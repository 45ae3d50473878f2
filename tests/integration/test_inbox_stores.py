"""The inbox read model and a blocked run's log text on every store (SQLite, PostgreSQL)."""

from __future__ import annotations

import pytest

from kanban import approvals, claims
from kanban.cards import NewCard
from kanban.queries import run_result
from kanban.service import Kanban
from kanban.transitions import Actor
from tests.support.db import STORES


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_the_inbox_and_the_blocked_runs_line_on_every_store(kb: Kanban) -> None:
    asking = kb.add_card(NewCard("deploy"))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, asking.id, now=kb.clock(), lease_s=30)
        approvals.request(conn, asking.id, "git push --force", "force push",
                          run_id=claim.run_id, actor=Actor("w", claim.claim_token),
                          now=kb.clock())
    gated = kb.add_card(NewCard("gated", review="reviewer:default"))
    with kb.db.write() as conn:
        review_claim = claims.claim_card(conn, gated.id, now=kb.clock(), lease_s=30)
    kb.complete(gated.id, "draft", actor=Actor("w", review_claim.claim_token), gated=True)
    stuck = kb.add_card(NewCard("stuck"))
    kb.block(stuck.id, "needs a key")
    found = kb.inbox()
    assert [(i.card_id, i.kind) for i in found.items] == [(asking.id, "approval"),
                                                          (stuck.id, "blocked")]
    assert found.items[0].commands[0].command == "git push --force"
    assert kb.card(asking.id).attempt - kb.card(asking.id).retry_base == 0  # none spent
    assert [i.card_id for i in kb.inbox(board="default", limit=1).items] == [asking.id]
    assert kb.inbox(limit=1).more
    with kb.db.read() as conn:
        result = run_result(conn, claim.run_id)
    assert result is not None and result.waits_for is not None
    assert "git push --force" in result.waits_for and f"kanban approve {asking.id}" in (
        result.waits_for)
