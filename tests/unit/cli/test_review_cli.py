"""The review and triage faces of the CLI: flags, approve/reject, cron gates, the board."""

from __future__ import annotations

from kanban.service import Kanban
from tests.support.db import claim_one, worker
from tests.unit.cli.conftest import Cli


def to_review(kanban: Kanban, card_id: int) -> None:
    kanban.complete(card_id, "first draft", actor=worker(claim_one(kanban, card_id)),
                    gated=True)


def test_add_stores_the_gate_and_show_prints_it(cli: Cli, kanban: Kanban) -> None:
    card = cli.json("add", "notes", "--human", "--max-reviews", "2")
    assert (card["review"], card["max_reviews"], card["reviews"]) == ("human", 2, 0)
    assert cli.json("add", "code", "--verify", "pytest -q")["review"] == "verify:pytest -q"
    to_review(kanban, card["id"])
    shown = cli.ok("show", str(card["id"])).stdout
    assert "review gate" in shown and "human (rounds that asked for changes: 0 of 2)" in shown


def test_reject_then_approve_from_the_cli(cli: Cli, kanban: Kanban) -> None:
    card = cli.add("notes", "--human")
    to_review(kanban, card)
    assert cli.ok("reject", str(card), "--feedback", "more detail").stdout.strip() == (
        f"#{card} sent back; it is ready")
    assert "more detail" in cli.ok("show", str(card)).stdout
    to_review(kanban, card)
    assert cli.ok("approve", str(card)).stdout.strip() == f"#{card} passed its review; it is done"
    assert kanban.card(card).feedback is None


def test_gate_errors_change_nothing(cli: Cli, kanban: Kanban) -> None:
    card = cli.add("plain")
    assert "only cards in review" in cli.fails("reject", str(card), "--feedback", "x")
    assert "one review gate" in cli.fails("add", "x", "--human", "--reviewer", "default")
    assert "invalid review gate" in cli.fails("add", "x", "--verify", "  ")
    assert "script job" in cli.fails("cron", "add", "s", "-s", "@daily", "--script", "true",
                                      "--review", "verify:true")
    assert "unknown profile" in cli.fails("cron", "add", "j", "-s", "@daily", "--goal", "g",
                                          "--review", "reviewer:nobody")
    cli.fails("reject", str(card), code=2)  # --feedback is required


def test_a_cron_job_gates_the_cards_it_creates(cli: Cli, kanban: Kanban) -> None:
    job = cli.json("cron", "add", "nightly", "-s", "@daily", "--goal", "g", "--review", "human")
    assert job["review"] == "human"
    cli.ok("cron", "run", "nightly")
    (card,) = kanban.list_cards()
    assert card.review == "human"
    cli.ok("cron", "edit", "nightly", "--clear", "review")
    assert cli.json("cron", "show", "nightly")["job"]["review"] is None


def test_the_board_has_triage_and_review_columns(cli: Cli, kanban: Kanban) -> None:
    card = cli.add("notes", "--human")
    to_review(kanban, card)
    counts = cli.json("board")["counts"]
    assert counts["review"] == 1 and counts["triage"] == 0
    text = cli.ok("board").stdout
    assert "review" in text and "triage" in text
