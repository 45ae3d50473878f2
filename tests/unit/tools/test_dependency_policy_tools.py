"""Agents set on_dependency_failure on the cards they create: kanban_create and delegate."""

from __future__ import annotations

import json
from pathlib import Path

from kanban.cards import NewCard
from kanban.children import ChildStatus
from kanban.service import Kanban
from kanban.tools.delegate import delegate
from tests.unit.daily.test_delegate import lead_scope
from tests.unit.tools.test_role_tools import call, scope_for


def test_kanban_create_takes_the_policy_and_refuses_a_bad_one(kb: Kanban) -> None:
    parent = kb.add_card(NewCard("parent"))
    scope = scope_for(kb, parent.id)
    first = json.loads(call(scope, ["kanban"], "kanban_create", title="first"))
    made = json.loads(call(scope, ["kanban"], "kanban_create", title="second",
                           depends_on=[first["id"]], on_dependency_failure="cancel"))
    assert kb.card(made["id"]).on_dependency_failure == "cancel"
    before = len(kb.list_cards())
    refused = call(scope, ["kanban"], "kanban_create", title="third",
                   on_dependency_failure="shrug")
    assert refused.startswith("ERROR") and "on_dependency_failure' must be one of" in refused
    assert len(kb.list_cards()) == before


def test_a_delegated_task_after_a_cancelled_one_is_cancelled_by_its_policy(
        kb: Kanban, tmp_path: Path) -> None:
    lead = lead_scope(kb, tmp_path)

    def cancel_the_first(statuses: list[ChildStatus]) -> None:  # plays a person
        first = statuses[0]
        if first.status == "ready":
            kb.cancel(first.id, reason="out of scope")

    lead.on_progress = cancel_the_first
    result = delegate({"tasks": [
        {"title": "fetch", "goal": "g"},
        {"title": "report", "goal": "g", "after": [0], "on_dependency_failure": "cancel"},
    ]}, lead)
    first, second = json.loads(result.content)["children"]
    card = kb.card(second["id"])
    assert (card.status, card.on_dependency_failure) == ("cancelled", "cancel")
    assert card.error == f"dependency #{first['id']} was cancelled: out of scope"
