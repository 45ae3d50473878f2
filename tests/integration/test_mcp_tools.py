"""The MCP server's tools and resources in process, on SQLite and PostgreSQL: each makes
the CLI's library call, answers bounded JSON, and turns a board error into one escaped
error line."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from kanban import approvals, claims
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.transitions import Actor
from tests.support.db import STORES
from tests.support.mcp_client import answer, call, in_process, resource_text, text_of

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def waiting_on_approval(kb: Kanban, title: str, board: str = "default") -> int:
    card = kb.add_card(NewCard(title, board=board))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
        approvals.request(conn, card.id, "git push --force", "force push", run_id=claim.run_id,
                          actor=Actor("w", claim.claim_token), now=kb.clock())
    return card.id


def in_review(kb: Kanban, title: str, board: str = "default") -> int:
    card = kb.add_card(NewCard(title, review="human", board=board))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
    kb.complete(card.id, "draft", actor=Actor("w", claim.claim_token), gated=True)
    return card.id


def test_add_card_takes_dependencies_a_gate_and_the_profile_defaults(kb: Kanban,
                                                                     tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[profiles.careful]\nmax_attempts = 7\n")
    first = answer(call(kb, tmp_path, "add_card", {"title": "first"}))["card"]["id"]
    added = answer(call(kb, tmp_path, "add_card", {
        "title": "second", "goal": "g", "profile": "careful", "depends_on": [first],
        "gate": "reviewer:careful", "priority": 5}))
    card = kb.card(added["card"]["id"])
    assert (card.status, card.review, card.max_attempts, card.priority, card.created_by) == (
        "todo", "reviewer:careful", 7, 5, "mcp")
    assert kb.detail(card.id).depends_on[0].id == first


@pytest.mark.parametrize(("args", "says"), [
    ({"profile": "nobody"}, "unknown profile 'nobody'"),
    ({"gate": "reviewer:nobody"}, "unknown profile 'nobody'"),
    ({"gate": "verify:touch /tmp/owned"}, "gate must be 'human' or 'reviewer:PROFILE'"),
    ({"depends_on": [999]}, "no card #999 on board 'default'"),
])
def test_add_card_refuses_before_anything_is_stored(kb: Kanban, tmp_path: Path,
                                                    args: dict[str, object], says: str) -> None:
    result = call(kb, tmp_path, "add_card", {"title": "t", **args})
    assert result.is_error and says in text_of(result)
    assert kb.list_cards() == []


def test_only_approving_a_command_is_marked_destructive(kb: Kanban, tmp_path: Path) -> None:
    async def listing() -> dict[str, tuple[bool | None, bool | None]]:
        async with in_process(kb, tmp_path) as client:
            tools = (await client.list_tools()).tools
            return {t.name: (t.annotations.read_only_hint, t.annotations.destructive_hint)
                    for t in tools if t.annotations is not None}

    hints = anyio.run(listing)
    assert len(hints) == 11
    assert {name for name, (_, destructive) in hints.items() if destructive} == {
        "approve_command"}
    assert {name for name, (read_only, _) in hints.items() if read_only} == {
        "list_cards", "search_cards", "show_card", "read_board"}


def test_command_approvals_are_approved_and_denied(kb: Kanban, tmp_path: Path) -> None:
    yes, no = waiting_on_approval(kb, "push"), waiting_on_approval(kb, "push again")
    approved = answer(call(kb, tmp_path, "approve_command", {"card_id": yes, "note": "ok"}))
    denied = answer(call(kb, tmp_path, "deny_command", {"card_id": no, "reason": "never"}))
    assert approved["card"]["status"] == denied["card"]["status"] == "ready"
    assert [(a.decision, a.decided_by) for a in kb.approvals(yes)] == [("approved", "mcp")]
    assert [(a.decision, a.reason) for a in kb.approvals(no)] == [("denied", "never")]
    again = call(kb, tmp_path, "approve_command", {"card_id": yes})
    assert again.is_error and "no pending approval" in text_of(again)


def test_reviews_are_accepted_and_sent_back(kb: Kanban, tmp_path: Path) -> None:
    accepted, sent_back = in_review(kb, "draft one"), in_review(kb, "draft two")
    wrong_tool = call(kb, tmp_path, "approve_command", {"card_id": accepted})
    assert wrong_tool.is_error and "use accept_review" in text_of(wrong_tool)
    assert answer(call(kb, tmp_path, "accept_review",
                       {"card_id": accepted}))["card"]["status"] == "done"
    back = answer(call(kb, tmp_path, "send_back_review",
                       {"card_id": sent_back, "feedback": "shorter, please"}))
    assert back["card"]["status"] == "ready"
    assert kb.card(sent_back).feedback == "shorter, please"


def test_show_card_lists_pending_approvals_and_the_board_shows_them(kb: Kanban,
                                                                   tmp_path: Path) -> None:
    card = waiting_on_approval(kb, "push")
    shown = answer(call(kb, tmp_path, "show_card", {"card_id": card}))
    assert [(a["command"], a["decision"]) for a in shown["approvals"]] == [
        ("git push --force", "pending")]
    board = answer(call(kb, tmp_path, "read_board", {"per_column": 5}))
    assert board["pending_approvals"] == [{"card_id": card, "command": "git push --force"}]


def test_a_lead_whose_model_cannot_be_built_is_refused_and_not_stored(kb: Kanban,
                                                                      tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[profiles.lead]\nmodel = "openai:gpt-test"\n')
    result = call(kb, tmp_path, "start_lead", {"goal": "plan"})
    assert result.is_error and "OPENAI_API_KEY" in text_of(result)
    assert kb.list_cards() == []


def test_resources_are_the_board_and_each_card(kb: Kanban, tmp_path: Path) -> None:
    card = kb.add_card(NewCard("read me")).id

    async def scenario() -> tuple[str, str, list[str]]:
        async with in_process(kb, tmp_path) as client:
            templates = await client.list_resource_templates()
            board = await client.read_resource("kanban://board")
            shown = await client.read_resource(f"kanban://cards/{card}")
            errors = []
            for uri in ("kanban://cards/999", "kanban://cards/abc", "kanban://cards/0"):
                with pytest.raises(MCPError) as refused:
                    await client.read_resource(uri)
                errors.append(refused.value.error.message)
            assert [t.uri_template for t in templates.resource_templates] == [
                "kanban://cards/{card_id}"]
            return resource_text(board), resource_text(shown), errors

    board, shown, errors = anyio.run(scenario)
    assert json.loads(board)["counts"]["ready"] == 1
    assert json.loads(shown)["card"]["title"] == "read me"
    assert errors == ["no card #999 on board 'default'", "not a card id: 'abc'",
                      "not a card id: '0'"]
