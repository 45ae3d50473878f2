"""`kanban edit`, positional text for block/complete, completion of values, time labels."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from kanban.cli.app import app
from kanban.service import Kanban
from tests.unit.cli.conftest import Cli


def test_edit_changes_only_what_is_given_and_records_it(cli: Cli) -> None:
    (cli.db_path.parent / "config.toml").write_text("[profiles.coder]\n")
    cli.add("Old title", "--goal", "old goal", "--priority", "1")
    edited = cli.json("edit", "1", "--title", "New title", "--priority", "9", "--profile",
                      "coder", "--max-attempts", "5", "--timeout", "120", "--goal", "new goal")
    assert edited["changed"] == ["goal", "max_attempts", "priority", "profile", "timeout_s",
                                 "title"]
    card = edited["card"]
    assert (card["title"], card["goal"], card["priority"], card["profile"],
            card["max_attempts"], card["timeout_s"]) == ("New title", "new goal", 9, "coder",
                                                         5, 120.0)
    [event] = [e for e in cli.json("show", "1")["events"] if e["kind"] == "edited"]
    assert event["data"]["priority"] == {"from": 1, "to": 9}
    assert event["data"]["title"] == {"from": "Old title", "to": "New title"}
    assert "goal" in event["data"]["changed"] and "goal" not in event["data"]  # text by name
    assert cli.ok("edit", "1", "--priority", "9").stdout.startswith("#1 unchanged")
    assert [e["kind"] for e in cli.json("show", "1")["events"]].count("edited") == 1


def test_edit_refusals_change_nothing(cli: Cli, kanban: Kanban) -> None:
    cli.add("a")
    assert "nothing to change" in cli.fails("edit", "1", code=2)
    assert "unknown profile 'nosuch'" in cli.fails("edit", "1", "--profile", "nosuch")
    assert "title must be one line" in cli.fails("edit", "1", "--title", "two\nlines")
    assert "no card #7" in cli.fails("edit", "7", "--title", "x")
    kanban.complete(1, "done")
    assert "cannot edit #1: it is done" in cli.fails("edit", "1", "--title", "late")


def test_block_and_complete_take_their_text_as_an_argument(cli: Cli) -> None:
    cli.add("a")
    cli.add("b")
    assert cli.ok("block", "1", "needs the API key").stdout == "#1 is blocked\n"
    assert cli.ok("complete", "2", "shipped in v2").stdout == "#2 is done\n"
    detail = cli.json("show", "2")
    assert detail["card"]["result"] == "shipped in v2"
    assert cli.json("show", "1")["comments"][0]["body"] == "blocked: needs the API key"
    cli.add("c")
    assert "give the summary once" in cli.fails("complete", "3", "x", "--summary", "y",
                                                code=2)
    assert "missing the reason" in cli.fails("block", "3", code=2)


def complete(args: list[str], incomplete: str, env: dict[str, str] | None = None) -> list[str]:
    """What the shell would offer for `kanban ARGS INCOMPLETE<TAB>` (bash)."""
    words = ["kanban", *args, incomplete]
    result = CliRunner().invoke(app, [], env={
        **(env or {}), "_KANBAN_COMPLETE": "bash_complete",
        "COMP_WORDS": " ".join(words), "COMP_CWORD": str(len(words) - 1)},
        prog_name="kanban", complete_var="_KANBAN_COMPLETE")
    return [line.split(",", 1)[1] for line in result.stdout.splitlines() if line]


def test_completion_offers_cards_boards_profiles_and_cron_jobs(cli: Cli) -> None:
    (cli.db_path.parent / "config.toml").write_text("[profiles.coder]\n[profiles.critic]\n")
    for title in ("one", "two", "three"):
        cli.add(title)
    cli.ok("complete", "2", "done")
    cli.ok("boards", "create", "ops")
    cli.ok("cron", "add", "nightly", "-s", "@daily", "--goal", "g")
    db = ["--db", str(cli.db_path)]
    assert complete([*db, "show"], "") == ["3", "1"]  # unfinished, newest first
    assert complete([*db, "show"], "#3") == ["3"]
    assert complete([*db, "list", "--board"], "o") == ["ops"]
    assert complete([*db, "add", "x", "--profile"], "c") == ["coder", "critic"]
    assert complete([*db, "cron", "show"], "ni") == ["nightly"]
    assert "dispatch" in complete([], "dis")
    assert complete(["--db", "/nonexistent/x.db", "show"], "") == []  # quietly nothing


def test_completion_script_for_each_shell() -> None:
    for shell, marker in (("bash", "complete -o nosort"), ("zsh", "compdef"),
                          ("fish", "complete --no-files")):
        result = CliRunner().invoke(app, ["completion", shell])
        assert result.exit_code == 0 and marker in result.stdout, shell
        assert "_KANBAN_COMPLETE" in result.stdout


def test_times_are_labelled_local_or_utc(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    cli.add("a")
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        local = cli.ok("show", "1")
        utc = cli.ok("show", "1", "--utc")
    finally:
        monkeypatch.undo()
        time.tzset()
    assert "+05:30" in local.stdout
    assert " UTC" in utc.stdout and "+05:30" not in utc.stdout
    stored = cli.json("show", "1")["card"]["created_at"]
    assert stored.endswith("+00:00")  # JSON stays ISO 8601 UTC


def test_every_read_command_speaks_json(cli: Cli) -> None:
    cli.add("a")
    for args in (["boards"], ["boards", "list"], ["cron", "list"], ["workers"], ["status"],
                 ["board"], ["list"], ["show", "1"], ["log", "1"]):
        result = cli(*args, "--json")
        assert result.exit_code == 0, (args, result.stderr)
        assert isinstance(json.loads(result.stdout), dict), args


def test_version() -> None:
    from kanban import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.stdout == f"kanban {__version__}\n"
    assert os.environ.get("KANBAN_DB") is None
