"""`kanban log`, `kanban show` (runs and history), `kanban workers` and the MCP server
number a card's runs by the attempts they spent, as the card's `attempt N/M` counts them:
not by the card's raw claim count."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing

from kanban import transitions
from kanban.cards import NewCard
from kanban.records import Claim
from kanban.service import Kanban
from kanban.states import Outcome
from kanban.transitions import Actor
from tests.unit.cli.conftest import Cli


def _claim(kb: Kanban) -> tuple[Claim, Actor]:
    [claim] = kb.claim(1, lease_s=30)
    return claim, Actor("worker", claim.claim_token)


def _every_kind_of_run(kb: Kanban) -> int:
    """Runs 1-5: blocked (asked a person), crashed, completed, then after `kanban retry`
    handed back (a dispatcher restart) and one still running."""
    card = kb.add_card(NewCard("Pick a database", max_attempts=3)).id
    _, worker = _claim(kb)
    kb.block(card, "which database?", actor=worker)
    kb.unblock(card, "sqlite")
    _, worker = _claim(kb)
    with kb.db.write() as conn:
        transitions.requeue_or_fail(conn, card, Outcome.CRASHED, "worker exited with code 1",
                                    now=kb.clock(), actor=worker, delay_s=0)
    _, worker = _claim(kb)
    kb.complete(card, "used sqlite", actor=worker)
    kb.retry(card)
    _, worker = _claim(kb)
    with kb.db.write() as conn:
        transitions.hand_back(conn, card, "dispatcher stopping", now=kb.clock(), actor=worker)
    _claim(kb)
    return card


def _labels(lines: list[str]) -> list[str]:
    return [m.group(1) for line in lines if (m := re.search(r"run \d+ · ([^·]+) · ", line))]


EXPECTED = ["no attempt spent", "attempt 1", "attempt 2", "no attempt spent", "attempt 1"]


def test_log_headers_count_the_attempts_runs_spent(cli: Cli, kanban: Kanban) -> None:
    card = _every_kind_of_run(kanban)
    log = cli.ok("log", str(card)).stdout.splitlines()
    assert _labels([line for line in log if line.startswith("── run ")]) == EXPECTED
    show = cli.ok("show", str(card)).stdout.splitlines()
    assert "· attempt 1/3 ·" in show[1]  # the running run, as the card counts it
    assert _labels([line for line in show if line.startswith("  run ")]) == EXPECTED
    assert [r["attempt"] for r in cli.json("log", str(card))["runs"]] == [1, 2, 3, 4, 5]


def test_a_review_round_starts_a_fresh_budget(cli: Cli, kanban: Kanban) -> None:
    card = kanban.add_card(NewCard("Write the notes", review="human")).id
    for _ in range(2):
        _, worker = _claim(kanban)
        kanban.complete(card, "draft", actor=worker, gated=True)
        if kanban.card(card).reviews == 0:
            cli.ok("reject", str(card), "--feedback", "cite your sources")
    log = cli.ok("log", str(card)).stdout.splitlines()
    assert _labels([line for line in log if line.startswith("── run ")]) == \
        ["attempt 1", "attempt 1"]
    assert "· attempt 1/3 ·" in cli.ok("show", str(card)).stdout.splitlines()[1]


def test_runs_whose_history_was_pruned_say_only_which_claim_they_were(cli: Cli,
                                                                      kanban: Kanban) -> None:
    card = _every_kind_of_run(kanban)
    with closing(sqlite3.connect(cli.db_path)) as conn, conn:
        conn.execute("DELETE FROM event WHERE card_id = ? AND run_id IN (1, 2)", (card,))
    log = cli.ok("log", str(card)).stdout.splitlines()
    assert _labels([line for line in log if line.startswith("── run ")]) == \
        ["claim 1", "claim 2", "claim 3", "no attempt spent", "attempt 1"]


def _claims_in_history(lines: list[str]) -> list[str]:
    return [line.split("ready → running; ", 1)[1].strip() for line in lines
            if "  claimed  " in line]


def test_the_history_labels_each_claim_as_its_run_not_by_the_claim_count(
        cli: Cli, kanban: Kanban) -> None:
    card = _every_kind_of_run(kanban)
    show = cli.ok("show", str(card)).stdout.splitlines()
    # the claimed events stored 1..5: the fifth claim is the first attempt of a fresh budget
    assert _claims_in_history(show[show.index("── history ──"):]) == EXPECTED
    assert not any("attempt=" in line for line in show)


def test_claims_whose_runs_are_gone_are_numbered_as_claims(cli: Cli, kanban: Kanban) -> None:
    card = _every_kind_of_run(kanban)
    with closing(sqlite3.connect(cli.db_path)) as conn, conn:
        conn.execute("UPDATE event SET run_id = NULL WHERE card_id = ? AND kind = 'claimed' "
                     "AND run_id = 2", (card,))
    show = cli.ok("show", str(card)).stdout.splitlines()
    assert _claims_in_history(show[show.index("── history ──"):])[1] == "claim 2"


def test_workers_say_which_attempt_of_the_budget_is_running(cli: Cli, kanban: Kanban) -> None:
    card = _every_kind_of_run(kanban)  # its fifth claim runs: attempt 1 of a fresh budget
    line = next(x for x in cli("workers", env={"COLUMNS": "200"}).stdout.splitlines()
                if f"#{card} " in x)
    assert f"#{card} attempt 1 " in line
    [worker] = cli.json("workers")["workers"]
    assert (worker["attempt"], worker["spent"]) == (5, 1)


def test_an_mcp_client_is_told_the_attempt_of_the_budget(kanban: Kanban) -> None:
    from kanban.mcp_server.board import brief

    card = _every_kind_of_run(kanban)
    shown = brief(kanban.card(card))
    assert (shown["attempt"], shown["max_attempts"]) == (1, 3)  # its fifth claim
