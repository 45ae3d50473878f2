"""A worker given a card with a command runs it through the command runner: no model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.config import Config
from kanban.state.store import Database
from kanban.worker.main import WorkerEnv, run_card
from tests.support.db import LEASE_S, claim_one, runs_of


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The worker's cwd, as the dispatcher sets it."""
    folder = tmp_path / "workspaces" / "default" / "card"
    folder.mkdir(parents=True)
    (tmp_path / "logs").mkdir()
    monkeypatch.chdir(folder)
    return folder


def run_script_card(kb: Kanban, db: Database, command: str, *,
                    env: dict[str, str] | None = None, **fields: object) -> int:
    card = kb.add_card(NewCard("script", command=command, **fields))  # type: ignore[arg-type]
    claim = claim_one(kb, card.id)
    assert db.path is not None
    wenv = WorkerEnv(str(db.path), claim.board, claim.card_id, claim.claim_token, claim.run_id,
                     LEASE_S)
    code = run_card(kb, wenv, Config(), {**os.environ, **(env or {})})
    assert code == 0
    return card.id


def test_stdout_is_the_result_and_stderr_stays_in_the_log(kb: Kanban, db: Database,
                                                          workspace: Path) -> None:
    card_id = run_script_card(kb, db, "echo result line; echo noise >&2; pwd")
    card = kb.card(card_id)
    assert card.status == "done"
    assert card.result == f"result line\n{workspace}"
    logs = db.path.parent / "logs"  # type: ignore[union-attr]
    assert (logs / f"{card_id}-1.stderr").read_text() == "noise\n"
    assert runs_of(db, card_id)[0]["outcome"] == "completed"


def test_a_non_zero_exit_fails_the_card_with_the_code_and_the_tail(kb: Kanban, db: Database,
                                                                   workspace: Path) -> None:
    card_id = run_script_card(kb, db, "echo partial; echo disk full >&2; exit 3", max_attempts=1)
    card = kb.card(card_id)
    assert card.status == "failed"
    assert card.error is not None
    assert card.error.startswith("script exited with code 3: disk full")
    assert "(attempt 1 of 1; no attempts left)" in card.error


def test_a_failing_script_with_attempts_left_is_retried(kb: Kanban, db: Database,
                                                        workspace: Path) -> None:
    card_id = run_script_card(kb, db, "exit 1", max_attempts=2)
    card = kb.card(card_id)
    assert (card.status, card.error) == ("ready", "script exited with code 1")


def test_a_script_past_its_time_is_stopped_and_fails(kb: Kanban, db: Database,
                                                     workspace: Path) -> None:
    card_id = run_script_card(kb, db, "echo started; sleep 60", timeout_s=2.0, max_attempts=1)
    card = kb.card(card_id)
    assert card.status == "failed" and card.error is not None
    assert card.error.startswith("script timed out: started")
    assert runs_of(db, card_id)[0]["outcome"] == "timed_out"


def test_the_cards_context_is_the_scripts_stdin(kb: Kanban, db: Database,
                                                workspace: Path) -> None:
    card_id = run_script_card(kb, db, "tr a-z A-Z", context="upstream said hi")
    assert kb.card(card_id).result == "UPSTREAM SAID HI"


def test_a_script_sees_no_credentials_and_no_claim_token(kb: Kanban, db: Database,
                                                         workspace: Path) -> None:
    card_id = run_script_card(kb, db, "env | sort", env={"OPENAI_API_KEY": "sk-not-for-you",
                                                         "LC_ALL": "C.UTF-8"})
    result = kb.card(card_id).result or ""
    names = {line.split("=", 1)[0] for line in result.splitlines()}
    assert {"KANBAN_CARD", "KANBAN_BOARD", "KANBAN_ATTEMPT", "PATH", "LC_ALL"} <= names
    assert not names & {"OPENAI_API_KEY", "KANBAN_CLAIM_TOKEN", "KANBAN_DB", "KANBAN_RUN"}
    assert f"KANBAN_CARD={card_id}" in result


def test_an_empty_output_still_completes(kb: Kanban, db: Database, workspace: Path) -> None:
    card_id = run_script_card(kb, db, "true")
    assert kb.card(card_id).result == "(the script printed nothing)"
