"""Every state a card can have is a filter wherever a status is taken (issue 29, item 5)."""

from __future__ import annotations

from kanban import claims
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.states import STATUS_NAMES, CardStatus
from kanban.transitions import Actor
from tests.unit.cli.conftest import Cli


def in_review(kb: Kanban, title: str) -> int:
    card = kb.add_card(NewCard(title, review="human"))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
    kb.complete(card.id, "draft", actor=Actor("w", claim.claim_token), gated=True)
    return card.id


def in_triage(kb: Kanban, title: str) -> int:
    card = kb.add_card(NewCard(title))
    kb.triage(card.id, decomposer="default", catalog="")
    return card.id


def test_the_one_list_names_every_state() -> None:
    assert set(STATUS_NAMES) == {s.value for s in CardStatus}


def test_list_search_and_board_filter_on_review_and_triage(cli: Cli, kanban: Kanban) -> None:
    reviewed = in_review(kanban, "gated pelican")
    triaged = in_triage(kanban, "rough pelican")
    for status, card_id in (("review", reviewed), ("triage", triaged)):
        listed = cli.json("list", "--status", status)
        assert [c["id"] for c in listed["cards"]] == [card_id]
        found = cli.json("search", "pelican", "--status", status)
        assert [h["card_id"] for h in found["hits"]] == [card_id]
        board = cli.json("board", "--status", status)
        assert list(board["columns"]) == [status]
        assert [c["id"] for c in board["columns"][status]] == [card_id]
        text = cli.ok("board", "--status", status).stdout
        assert text.splitlines()[1] == f"{status} 1" and f"#{card_id}" in text


def test_every_state_is_accepted_by_list(cli: Cli) -> None:
    for status in STATUS_NAMES:
        cli.ok("list", "--status", status)
        cli.ok("search", "x", "--status", status)
        cli.ok("board", "--status", status)
