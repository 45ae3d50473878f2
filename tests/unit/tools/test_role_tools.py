"""Toolsets granted by role: a reviewer's verdict, an orchestrator's list and unblock."""

from __future__ import annotations

import json

import pytest

from kanban.agent.types import ToolCall
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.config import Config, Profile
from kanban.state.errors import ConfigError
from kanban.tools.catalog import REGISTRY
from kanban.tools.scope import WorkerScope
from kanban.toolsets import check
from kanban.worker.plan import worker_toolsets
from tests.support.db import claim_one, worker


def scope_for(kb: Kanban, card_id: int) -> WorkerScope:
    claim = claim_one(kb, card_id)
    return WorkerScope(kb, claim.board, claim.card_id, claim.claim_token, claim.run_id)


def call(scope: WorkerScope, toolsets: list[str], name: str, **arguments: object) -> str:
    box = REGISTRY.toolbox(toolsets, scope)
    result = box.call(ToolCall(id="1", name=name, arguments=json.dumps(arguments)))
    return ("ERROR " if result.is_error else "") + result.content


def test_roles_grant_their_toolsets_and_names_alone_never_do(kb: Kanban) -> None:
    config = Config()
    reviewer = kb.add_card(NewCard("r", role="reviewer", subject_id=None))
    plain = kb.add_card(NewCard("p"))
    assert "review" in worker_toolsets(reviewer, Profile(), config, has_skills=False)
    assert "review" not in worker_toolsets(plain, Profile(), config, has_skills=False)
    boss = Profile(name="boss", role="orchestrator")
    assert "orchestrator" in worker_toolsets(plain, boss, config, has_skills=False)
    for name in ("review", "orchestrator", "triage"):
        with pytest.raises(ConfigError, match="granted by a role"):
            check(["kanban", name], config, "--toolsets")


def test_orchestrator_lists_its_board_and_unblocks(kb: Kanban) -> None:
    kb.ensure_board("other")
    stuck = kb.add_card(NewCard("stuck on a question", profile="bash"))
    kb.block(stuck.id, "which database?")
    kb.add_card(NewCard("elsewhere", board="other"))
    boss = kb.add_card(NewCard("steer", priority=10))
    scope = scope_for(kb, boss.id)
    listed = json.loads(call(scope, ["orchestrator"], "kanban_list", status="blocked"))
    assert [(c["id"], c["error"]) for c in listed["cards"]] == [(stuck.id, "which database?")]
    everything = json.loads(call(scope, ["orchestrator"], "kanban_list"))
    assert {c["title"] for c in everything["cards"]} == {"stuck on a question", "steer"}
    by_text = json.loads(call(scope, ["orchestrator"], "kanban_list", text="QUESTION",
                              profile="bash"))
    assert [c["id"] for c in by_text["cards"]] == [stuck.id]
    assert call(scope, ["orchestrator"], "kanban_unblock", card_id=stuck.id,
                note="use sqlite") == f"#{stuck.id} is ready"
    assert kb.card(stuck.id).status == "ready"
    other = kb.list_cards(board="other")[0]
    kb.block(other.id, "x")
    refused = call(scope, ["orchestrator"], "kanban_unblock", card_id=other.id, note="no")
    assert refused.startswith("ERROR") and "no card" in refused
    assert kb.card(other.id).status == "blocked"


def test_a_reviewer_tool_on_a_plain_card_is_refused(kb: Kanban) -> None:
    card = kb.add_card(NewCard("not a reviewer"))
    scope = scope_for(kb, card.id)
    refused = call(scope, ["review"], "kanban_approve", note="ok")
    assert refused.startswith("ERROR") and "not a reviewer card" in refused
    assert kb.card(card.id).status == "running"


def test_a_reviewer_approves_its_subject_and_finishes(kb: Kanban) -> None:
    gated = kb.add_card(NewCard("essay", review="reviewer:default"))
    kb.complete(gated.id, "v1", actor=worker(claim_one(kb, gated.id)), gated=True)
    (reviewer,) = [c for c in kb.list_cards() if c.role == "reviewer"]
    scope = scope_for(kb, reviewer.id)
    assert "passed its review" in call(scope, ["review"], "kanban_approve", note="good")
    assert kb.card(gated.id).status == "done"
    assert kb.card(reviewer.id).result == f"approved #{gated.id}: good"
