"""Asking a person: a dangerous command blocks the card, approve/deny requeue it, the next
attempt runs an approved command without asking or is told of the denial."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kanban import approvals
from kanban.cards import NewCard
from kanban.claims import ClaimFilter
from kanban.errors import InvalidTransition
from kanban.service import Kanban
from kanban.tools.scope import WorkerScope
from kanban.tools.workbench import Workbench
from kanban.transitions import Actor
from tests.unit.work.conftest import call

COMMAND = "echo ran > proof.txt; git push --force"
pytestmark = pytest.mark.parametrize(
    "store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)


def claimed_scope(kb: Kanban, card_id: int) -> WorkerScope:
    (claim,) = kb.claim(1, lease_s=30)
    assert claim.card_id == card_id
    return WorkerScope(kb, claim.board, claim.card_id, claim.claim_token, claim.run_id)


def events(kb: Kanban, card_id: int) -> list[tuple[str, dict[str, object]]]:
    return [(e.kind, json.loads(e.data)) for e in kb.detail(card_id).events]


@pytest.fixture
def asking(kb: Kanban, bench: Workbench) -> tuple[Workbench, int]:
    card_id = kb.add_card(NewCard(title="deploy")).id
    return dataclasses.replace(bench, approval="ask", scope=claimed_scope(kb, card_id)), card_id


def test_ask_blocks_the_card_with_the_exact_command(kb: Kanban, asking: tuple[Workbench, int],
                                                    workspace: Path) -> None:
    bench, card_id = asking
    result = call(bench, "terminal", command=COMMAND)
    assert result.ends_run and not result.is_error
    assert "needs a person's approval" in result.content
    assert bench.scope is not None and bench.scope.finished == "blocked"
    assert not (workspace / "proof.txt").exists()
    card = kb.card(card_id)
    assert card.status == "blocked" and COMMAND in (card.error or "")
    assert f"kanban approve {card_id}" in (card.error or "")
    (pending,) = kb.approvals(card_id)
    assert (pending.command, pending.pattern, pending.decision) == (COMMAND, "force push",
                                                                    "pending")
    kinds = [kind for kind, _ in events(kb, card_id)]
    assert kinds[-3:] == ["block", "commented", "approval_requested"]
    assert kb.board_snapshot("default").approvals == {card_id: [COMMAND]}


def test_approve_requeues_and_the_next_attempt_runs_it_without_asking(
        kb: Kanban, asking: tuple[Workbench, int], workspace: Path) -> None:
    bench, card_id = asking
    call(bench, "terminal", command=COMMAND)
    card = kb.approve(card_id, reason="fine once")
    assert card.status == "ready"
    (decided,) = kb.approvals(card_id)
    assert (decided.decision, decided.decided_by, decided.reason) == ("approved", "user",
                                                                      "fine once")
    again = dataclasses.replace(bench, scope=claimed_scope(kb, card_id))
    result = call(again, "terminal", command=COMMAND)
    assert "exit code" in result.content and (workspace / "proof.txt").read_text() == "ran\n"
    assert kb.card(card_id).status == "running"
    assert call(again, "terminal", command=COMMAND + " ").ends_run  # not exactly the same
    kinds = [kind for kind, _ in events(kb, card_id)]
    assert "approval_approved" in kinds and "command_allowed" in kinds
    assert kb.board_snapshot("default").approvals == {card_id: [COMMAND + " "]}
    kb.unblock(card_id, "never mind")  # by hand: the request no longer shows
    kb.block(kb.add_card(NewCard(title="other")).id, "waits for a person")
    assert kb.board_snapshot("default").approvals == {}


def test_deny_requeues_and_the_agent_is_told(kb: Kanban, asking: tuple[Workbench, int],
                                             workspace: Path) -> None:
    bench, card_id = asking
    call(bench, "terminal", command=COMMAND)
    assert kb.deny(card_id, reason="never on main").status == "ready"
    again = dataclasses.replace(bench, scope=claimed_scope(kb, card_id))
    result = call(again, "terminal", command=COMMAND)
    assert result.is_error and "denied this exact command (never on main)" in result.content
    assert not (workspace / "proof.txt").exists()
    comments = [c.body for c in kb.detail(card_id).comments]
    assert any("denied: " + COMMAND in c and "never on main" in c for c in comments)


def test_deny_mode_refuses_and_records_the_decision(kb: Kanban, bench: Workbench) -> None:
    card_id = kb.add_card(NewCard(title="child work")).id
    denying = dataclasses.replace(bench, approval="deny", scope=claimed_scope(kb, card_id))
    result = call(denying, "terminal", command="rm -rf ~")
    assert result.is_error and "recursive delete outside the workspace" in result.content
    assert kb.card(card_id).status == "running" and kb.approvals(card_id) == []
    assert ("command_refused", {"command": "rm -rf ~", "mode": "deny",
                                "pattern": "recursive delete outside the workspace"}) in events(
        kb, card_id)


def test_approve_needs_a_pending_approval(kb: Kanban) -> None:
    card_id = kb.add_card(NewCard(title="plain")).id
    with pytest.raises(InvalidTransition, match="has no pending approval"):
        kb.approve(card_id)
    with pytest.raises(InvalidTransition, match="has no pending approval"):
        kb.deny(card_id, reason="x")


def ask(kb: Kanban, card_id: int, command: str) -> None:
    """The claimed card's worker asks to run `command` (its card is then blocked)."""
    (claim,) = kb.claim(1, lease_s=30, flt=ClaimFilter(board=kb.card(card_id).board))
    assert claim.card_id == card_id
    with kb.db.write() as conn:
        approvals.request(conn, card_id, command, "a pattern", run_id=claim.run_id,
                          actor=Actor(f"card:#{card_id}", claim.claim_token), now=kb.clock())


def test_the_board_lists_pending_approvals_of_its_blocked_cards_oldest_first(kb: Kanban) -> None:
    kb.create_board("other")
    first = kb.add_card(NewCard(title="first")).id
    second = kb.add_card(NewCard(title="second", priority=1)).id
    ask(kb, second, "asked first")  # the later card asks first: oldest request first
    ask(kb, first, "asked second")
    unblocked = kb.add_card(NewCard(title="unblocked")).id
    ask(kb, unblocked, "stale")
    kb.unblock(unblocked, "done by hand")  # no longer waits on its request
    decided = kb.add_card(NewCard(title="decided", priority=1)).id
    ask(kb, decided, "decided")
    elsewhere = kb.add_card(NewCard(title="elsewhere", board="other")).id
    kb.approve(decided)
    ask(kb, elsewhere, "other board")
    with kb.db.read() as conn:
        pending = approvals.pending_on_board(conn, "default")
    assert [(a.card_id, a.command) for a in pending] == [(second, "asked first"),
                                                          (first, "asked second")]
    assert kb.board_snapshot("default").approvals == {second: ["asked first"],
                                                      first: ["asked second"]}


def test_unblocking_or_cancelling_by_hand_withdraws_the_pending_requests(kb: Kanban) -> None:
    unblocked = kb.add_card(NewCard(title="unblocked")).id
    ask(kb, unblocked, "rm -rf build")
    kb.unblock(unblocked, "done by hand")
    cancelled = kb.add_card(NewCard(title="cancelled", priority=1)).id
    ask(kb, cancelled, "curl example.com")
    kb.cancel(cancelled)
    for card_id in (unblocked, cancelled):
        (request,) = kb.approvals(card_id)
        assert request.decision == approvals.WITHDRAWN and request.decided_by == "user"
        with kb.db.read() as conn:  # neither approved nor denied: asked again next time
            assert approvals.decision_for(conn, card_id, request.command) is None
        with pytest.raises(InvalidTransition, match="has no pending approval"):
            kb.approve(card_id)
