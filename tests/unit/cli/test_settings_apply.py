"""Settings that apply where README says they do (issue 29, "settings that do not apply")."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from kanban.children import ChildStatus
from kanban.cli.lead import children_lines
from kanban.service import Kanban
from kanban.state.config import Config, Limits
from kanban.tools import delegate
from kanban.worker.redact import redact
from tests.unit.cli.conftest import Cli


def test_a_profiles_max_attempts_applies_to_cards_added_from_the_cli(cli: Cli) -> None:
    (cli.db_path.parent / "config.toml").write_text("[profiles.flaky]\nmax_attempts = 7\n")
    assert cli.json("add", "uses the profile's", "--profile", "flaky")["max_attempts"] == 7
    given = cli.json("add", "overridden", "--profile", "flaky", "--max-attempts", "2")
    assert given["max_attempts"] == 2
    assert cli.json("add", "the default profile's")["max_attempts"] == 3


def _role_offered(max_depth: int, depth: int = 0) -> bool:
    config = Config(limits=Limits(max_depth=max_depth))
    task = delegate.tool_for(config, depth).parameters["properties"]["tasks"]["items"]
    return "role" in task["properties"]


def test_role_orchestrator_is_offered_only_where_it_can_work() -> None:
    assert not _role_offered(max_depth=1)  # a child of the lead could not delegate
    assert _role_offered(max_depth=2)
    assert not _role_offered(max_depth=2, depth=1)


def test_live_lines_show_the_latest_heartbeat_note() -> None:
    now = datetime.now(UTC)
    running = ChildStatus(2, "alpha", "running", None, None, now, None, "halfway through",
                          now, json.dumps({"doing": "model", "turn": 3, "max_turns": 20}))
    (line,) = children_lines([running], now)
    assert "halfway through" in line and "t3/20" in line


def test_live_lines_keep_the_latest_heartbeat_note_through_plain_heartbeats(
        kanban: Kanban) -> None:
    """Through the board: the worker's note, then its heartbeat thread's renewals (no note)."""
    from kanban.cards import NewCard
    from kanban.children import children_status

    card = kanban.add_card(NewCard("alpha")).id
    (claim,) = kanban.claim(1, lease_s=30)
    for note in ("reading the sources", "halfway through", None, None):
        kanban.heartbeat(card, claim.claim_token, run_id=claim.run_id, lease_s=30, note=note)
    with kanban.db.read() as conn:
        (line,) = children_lines(children_status(conn, [card]), datetime.now(UTC))
    assert line.startswith(f"#{card} running") and line.endswith(": halfway through")


def test_redaction_ignores_values_shorter_than_eight_characters() -> None:
    assert redact("Finished the task", ["nish"]) == "Finished the task"
    assert redact("key sk-12345678 here", ["nish", "sk-12345678"]) == "key [redacted] here"



def test_cron_list_shows_a_chained_script_as_chain(cli: Cli) -> None:
    cli.ok("cron", "add", "fetch", "-s", "every 1h", "--script", "echo feed")
    cli.ok("cron", "add", "digest", "-s", "every 1h", "--script", "cat", "--context-from",
           "fetch")
    kinds = {job["name"]: job["kind"] for job in cli.json("cron", "list")["jobs"]}
    assert kinds == {"fetch": "script", "digest": "chain"}
    line = next(x for x in cli.ok("cron", "list").stdout.splitlines() if "digest" in x)
    assert "chain" in line


def test_a_persons_unblock_note_is_in_the_next_attempts_prompt(cli: Cli) -> None:
    card = cli.add("needs a decision")
    cli.ok("block", str(card), "--reason", "which database?")
    cli.ok("unblock", str(card), "--note", "use the staging database")
    opening = " ".join(m["content"] for m in cli.json("context", str(card))["messages"])
    assert "A person unblocked your card with this note:\nuse the staging database" in opening


def test_a_profiles_max_attempts_applies_to_cron_cards(cli: Cli) -> None:
    (cli.db_path.parent / "config.toml").write_text("[profiles.flaky]\nmax_attempts = 7\n")
    cli.ok("cron", "add", "daily", "-s", "every 1h", "--goal", "g", "--profile", "flaky")
    cli.ok("cron", "add", "own", "-s", "every 1h", "--goal", "g", "--profile", "flaky",
           "--max-attempts", "2")
    cli.ok("cron", "add", "script", "-s", "every 1h", "--script", "true", "--profile", "flaky")
    cards = {}
    for job in ("daily", "own", "script"):
        card = cli.json("cron", "run", job)["card_id"]
        cards[job] = cli.json("show", str(card))["card"]["max_attempts"]
    assert cards == {"daily": 7, "own": 2, "script": 1}


def test_a_profiles_max_attempts_applies_to_cards_added_from_the_web(cli: Cli,
                                                                     kanban: Kanban) -> None:
    from kanban.web import actions

    home = cli.db_path.parent
    (home / "config.toml").write_text("[profiles.flaky]\nmax_attempts = 7\n")
    web = cast(Any, SimpleNamespace(board="default", home=home, kanban=kanban))
    added, _, _ = actions.add(web, None, {"title": "from the web", "profile": "flaky"})
    given, _, _ = actions.add(web, None, {"title": "set", "profile": "flaky",
                                          "max_attempts": "2"})
    assert (added["max_attempts"], given["max_attempts"]) == (7, 2)


def test_a_profiles_review_gate_applies_to_cards_added_from_the_cli_web_and_cron(
        cli: Cli, kanban: Kanban) -> None:
    from kanban.web import actions

    home = cli.db_path.parent
    (home / "config.toml").write_text('[profiles.gated]\nreview = "human"\n')
    assert cli.json("add", "from the cli", "--profile", "gated")["review"] == "human"
    assert cli.json("add", "own gate", "--profile", "gated", "--verify", "true")["review"] \
        == "verify:true"
    web = cast(Any, SimpleNamespace(board="default", home=home, kanban=kanban))
    added, _, _ = actions.add(web, None, {"title": "from the web", "profile": "gated"})
    assert added["review"] == "human"
    cli.ok("cron", "add", "daily", "-s", "every 1h", "--goal", "g", "--profile", "gated")
    cli.ok("cron", "add", "own", "-s", "every 1h", "--goal", "g", "--profile", "gated",
           "--review", "verify:true")
    cli.ok("cron", "add", "script", "-s", "every 1h", "--script", "true", "--profile", "gated")
    gates = {job: cli.json("show", str(cli.json("cron", "run", job)["card_id"]))["card"]
             ["review"] for job in ("daily", "own", "script")}
    assert gates == {"daily": "human", "own": "verify:true", "script": None}


def test_the_web_board_reads_the_config_kanban_config_names(cli: Cli, kanban: Kanban,
                                                            tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            ) -> None:
    """As `kanban add`, `status` and `dispatch` do: KANBAN_CONFIG over the board's file."""
    from kanban.web import actions

    home = cli.db_path.parent
    (home / "config.toml").write_text("[profiles.flaky]\nmax_attempts = 7\n")
    chosen = tmp_path / "elsewhere.toml"
    chosen.write_text("[profiles.flaky]\nmax_attempts = 5\n")
    monkeypatch.setenv("KANBAN_CONFIG", str(chosen))
    web = cast(Any, SimpleNamespace(board="default", home=home, kanban=kanban))
    added, _, _ = actions.add(web, None, {"title": "from the web", "profile": "flaky"})
    assert added["max_attempts"] == 5
    assert cli.json("add", "from the cli", "--profile", "flaky")["max_attempts"] == 5
