"""Every command's happy path and its --json shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kanban.cli.app import app
from kanban.service import Kanban
from kanban.state.db import open_database
from kanban.state.paths import DbLocation
from kanban.state.store import Database
from tests.unit.cli.conftest import Cli


def cli_db(cli: Cli) -> Database:
    return open_database(DbLocation(str(cli.db_path), "flag"))

CARD_KEYS = {"id", "board", "title", "goal", "context", "status", "priority", "profile",
             "parent_id", "created_by", "attempt", "max_attempts", "timeout_s", "result",
             "error", "created_at", "updated_at", "archived_at"}


def test_init_creates_project_db_in_cwd_and_is_idempotent(monkeypatch: pytest.MonkeyPatch,
                                                          ) -> None:
    runner = CliRunner()
    first = runner.invoke(app, ["init"])
    assert first.exit_code == 0, first.stderr
    db = Path.cwd() / ".kanban" / "kanban.db"
    assert f"created at {db}" in first.stdout
    assert db.stat().st_mode & 0o777 == 0o600
    again = runner.invoke(app, ["init"])
    assert again.exit_code == 0
    assert f"already at {db}" in again.stdout
    sub = db.parent.parent / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)  # later commands find it walking up, like git
    boards = runner.invoke(app, ["boards", "list", "--json"])
    assert boards.exit_code == 0, boards.stderr
    assert json.loads(boards.stdout) == {"boards": [{"name": "default", "paused": False,
                                                     "cards": 0,
                                                     "on_dependency_failure": "block"}]}


def test_init_honours_kanban_db(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "k.db"
    result = CliRunner().invoke(app, ["init"], env={"KANBAN_DB": str(target)})
    assert result.exit_code == 0, result.stderr
    assert target.exists()
    assert not (Path.cwd() / ".kanban").exists()


def test_no_database_is_created_silently(isolated_env: Path) -> None:
    result = CliRunner().invoke(app, ["add", "first"])
    assert result.exit_code == 1
    assert "no kanban database found" in result.stderr
    assert "run `kanban init`" in result.stderr
    assert not (isolated_env / ".local/share/kanban").exists()
    assert not (Path.cwd() / ".kanban").exists()


def test_a_user_wide_database_is_used_when_it_exists(isolated_env: Path) -> None:
    target = isolated_env / ".local/share/kanban/kanban.db"
    assert CliRunner().invoke(app, ["--db", str(target), "init"]).exit_code == 0
    result = CliRunner().invoke(app, ["add", "first"])
    assert result.exit_code == 0, result.stderr
    assert CliRunner().invoke(app, ["status", "--json"]).stdout.count(str(target)) == 1


def test_init_writes_a_gitignore() -> None:
    assert CliRunner().invoke(app, ["init"]).exit_code == 0
    ignore = Path.cwd() / ".kanban" / ".gitignore"
    assert ignore.read_text().splitlines()[-1] == "*"


def test_add_prints_id_and_json(cli: Cli) -> None:
    (cli.db_path.parent / "config.toml").write_text('[profiles.coder]\nmax_turns = 5\n')
    assert cli.ok("add", "Write the parser").stdout == "#1\n"
    card = cli.json("add", "Test it", "--goal", "green tests", "--context", "see #1",
                    "--priority", "7", "--depends-on", "#1", "--profile", "coder",
                    "--max-attempts", "5", "--timeout", "90")
    assert card.keys() >= CARD_KEYS
    assert card["id"] == 2
    assert card["status"] == "todo"  # waits for #1
    assert (card["goal"], card["context"], card["priority"]) == ("green tests", "see #1", 7)
    assert (card["profile"], card["max_attempts"], card["timeout_s"]) == ("coder", 5, 90.0)
    assert [d["id"] for d in cli.json("show", "2")["depends_on"]] == [1]


def test_add_on_board_from_flag_and_env(cli: Cli) -> None:
    cli.ok("boards", "create", "ops")
    assert cli.json("add", "flag", "--board", "ops")["board"] == "ops"
    from_env = cli("add", "env", "--json", env={"KANBAN_BOARD": "ops"})
    assert json.loads(from_env.stdout)["board"] == "ops"
    assert [c["title"] for c in cli.json("list", "-b", "ops")["cards"]] == ["env", "flag"]
    assert cli.json("list")["cards"] == []


def test_list_filters_and_json(cli: Cli) -> None:
    for title in ("a", "b", "c"):
        cli.add(title)
    cli.ok("complete", "1", "--summary", "ok")
    cli.ok("archive", "1")
    cli.ok("block", "2", "--reason", "why")
    assert [c["id"] for c in cli.json("list")["cards"]] == [3, 2]
    assert [c["id"] for c in cli.json("list", "--archived")["cards"]] == [3, 2, 1]
    assert [c["id"] for c in cli.json("list", "--status", "blocked", "-s", "ready")["cards"]] \
        == [3, 2]
    page = cli.json("list", "--limit", "1")
    assert ([c["id"] for c in page["cards"]], page["total"], page["more"]) == ([3], 2, 1)
    # totals from the kept counts: the archived done card is not counted, other states not
    page = cli.json("list", "--limit", "1", "-s", "blocked", "-s", "done")
    assert ([c["id"] for c in page["cards"]], page["total"], page["more"]) == ([2], 1, 0)
    assert cli.json("list", "--limit", "1", "--archived")["total"] == 3
    cards = cli.json("list")["cards"]
    assert cards[0].keys() >= CARD_KEYS
    table = cli.ok("list").stdout
    assert "#2" in table and "blocked" in table and "#1" not in table


def test_list_empty(cli: Cli) -> None:
    result = cli.ok("list")
    assert result.stdout == "" and "no cards" in result.stderr


def test_show_names_what_a_waiting_card_waits_on(cli: Cli, kanban: Kanban) -> None:
    from tests.support.db import put_card_in

    card = put_card_in(kanban, "waiting", role="orchestrator")
    shown = cli.ok("show", str(card.id)).stdout
    child = card.id + 1
    assert f"waiting on #{child}" in shown and "role orchestrator" in shown
    assert "tree: 2 cards · 0 turns · 0 tokens" in shown
    assert cli.json("show", str(card.id))["card"]["status"] == "waiting"
    assert f"#{card.id}" in cli.ok("list", "--status", "waiting").stdout


def test_show_text_and_json(cli: Cli, kanban: Kanban) -> None:
    from kanban.cards import NewCard

    cli.add("parent")
    cli.add("dep")
    cli.add("blocked by dep", "--depends-on", "2")
    kanban.add_card(NewCard(title="child", parent_id=1, created_by="card:#1"))
    kanban.add_card(NewCard(title="grandchild", parent_id=4, created_by="card:#4"))
    cli.ok("link", "1", "2")
    cli.ok("comment", "1", "looks [bold]fine[/]")
    detail = cli.json("show", "1")
    assert set(detail) == {"card", "depends_on", "dependents", "children", "comments", "runs",
                           "events", "attachments", "approvals", "tree",
                           "on_dependency_failure"}
    assert detail["approvals"] == [] and detail["card"]["workspace"] is None
    assert detail["tree"] == {"cards": 3, "turns": 0, "tokens": 0, "cost": 0.0, "unpriced_calls": 0}
    assert detail["card"]["id"] == 1
    assert detail["depends_on"] == [{"id": 2, "title": "dep", "status": "ready", "result": None}]
    assert [c["id"] for c in detail["children"]] == [4]
    assert detail["comments"][0]["body"] == "looks [bold]fine[/]"
    assert [e["kind"] for e in detail["events"]] == ["created", "linked", "demoted", "commented"]
    assert detail["events"][1]["data"] == {"depends_on_id": 2}
    text = cli.ok("show", "#1").stdout
    for expected in ("#1 parent", "depends on", "#2 ready dep", "children", "#4 ready child",
                     "#5 ready grandchild", "looks [bold]fine[/]", "history", "ready → todo"):
        assert expected in text, expected
    dependents = cli.ok("show", "2").stdout
    assert "dependents" in dependents and "#3 todo blocked by dep" in dependents


def test_show_cuts_long_context_only_on_a_terminal(cli: Cli) -> None:
    from kanban.cli.plain import card_view

    cli.add("big", "--context", "x" * 5000)
    assert "x" * 5000 in cli.ok("show", "1").stdout  # piped: whole
    detail = Kanban(cli_db(cli)).detail(1)
    assert any("3,000 more characters" in line for line in card_view(detail, [], full=False))


def test_log_shows_each_run(cli: Cli, kanban: Kanban) -> None:
    from kanban import claims

    cli.add("work")
    assert "no runs yet" in cli.ok("log", "1").stdout
    assert cli.json("log", "1") == {"card_id": 1, "runs": []}
    [claim] = kanban.claim(1, lease_s=30)
    now = kanban.clock()
    with kanban.db.write() as conn:
        claims.append_message(conn, claim.run_id, 0, {"role": "user", "content": "do it"},
                              now=now)
        claims.append_message(conn, claim.run_id, 1, {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "kanban_complete", "arguments": '{"summary": "done"}'}}],
        }, now=now)
        claims.append_message(conn, claim.run_id, 2, {
            "role": "tool", "content": "ok", "tool_call_id": "c1", "name": "kanban_complete"},
            now=now)
        claims.record_usage(conn, claim.run_id, 1, "scripted:demo", input_tokens=120,
                            output_tokens=30, cached_tokens=0, now=now)
    kanban.complete(1, "done")
    log = cli.json("log", "1")
    assert log["card_id"] == 1
    [run] = log["runs"]
    assert (run["id"], run["outcome"], run["input_tokens"], run["output_tokens"]) == \
        (claim.run_id, "completed", 120, 30)
    assert [m["role"] for m in run["messages"]] == ["user", "assistant", "tool"]
    assert run["messages"][1]["tool_calls"][0]["function"]["name"] == "kanban_complete"
    text = cli.ok("log", "1").stdout
    for expected in ("attempt 1", "completed", "120 in / 30 out", "user: do it",
                     'kanban_complete({"summary": "done"})', "tool kanban_complete: ok"):
        assert expected in text, expected


def test_comment_link_unlink(cli: Cli) -> None:
    cli.add("a")
    cli.add("b")
    assert cli.ok("comment", "1", "hi").stdout.endswith("added to #1\n")
    assert cli.ok("link", "2", "1").stdout == "#2 now depends on #1\n"
    assert cli.ok("link", "2", "1").stdout == "#2 already depends on #1\n"
    assert cli.json("show", "2")["card"]["status"] == "todo"
    assert cli.ok("unlink", "2", "1").stdout == "#2 no longer depends on #1\n"
    assert cli.json("show", "2")["card"]["status"] == "ready"


def test_transitions(cli: Cli) -> None:
    cli.add("a")
    cli.add("b", "--depends-on", "1")
    assert cli.ok("block", "1", "--reason", "need a key").stdout == "#1 is blocked\n"
    assert cli.ok("unblock", "1", "--note", "key in vault").stdout == "#1 is ready\n"
    assert cli.ok("complete", "1", "--summary", "shipped").stdout == "#1 is done\n"
    assert cli.json("show", "2")["card"]["status"] == "ready"  # promoted
    assert cli.ok("cancel", "2", "--reason", "not needed").stdout == "#2 is cancelled\n"
    assert cli.ok("retry", "2").stdout == "#2 is ready\n"
    cli.ok("cancel", "2")
    assert cli.ok("archive", "2").stdout == "#2 is archived (cancelled)\n"
    card = cli.json("show", "1")
    assert card["card"]["result"] == "shipped"
    assert [c["body"] for c in card["comments"]] == ["blocked: need a key",
                                                     "unblocked: key in vault"]


def test_pause_resume_and_status(cli: Cli) -> None:
    cli.ok("boards", "create", "ops")
    cli.add("a")
    cli.add("b")
    cli.ok("complete", "2", "--summary", "x")
    assert cli.ok("pause").stdout == "spawning paused globally\n"
    assert cli.ok("pause", "--board", "ops").stdout == "spawning paused on board 'ops'\n"
    status = cli.json("status")
    assert status.pop("version") and status.pop("database") == str(cli.db_path)
    assert status.pop("config") == str(cli.db_path.parent / "config.toml")
    assert (status.pop("database_source"), status.pop("config_exists")) == ("flag", False)
    assert status.pop("sandbox") == {}  # said per live dispatcher
    assert status.pop("journal_warning") is None  # WAL on a local disk
    assert status.pop("journal") == "wal"
    assert status.pop("config_error") is None
    assert status.pop("reach")["general"]["network"] is True  # per profile that runs commands
    assert status.pop("failing_notifications") == []  # no notification target failing
    assert status == {"board": None, "counts": {
        "triage": 0, "scheduled": 0, "todo": 0, "ready": 1, "running": 0, "review": 0,
        "waiting": 0, "blocked": 0, "done": 1, "failed": 0, "cancelled": 0}, "total": 2,
        "paused_globally": True, "paused_boards": ["ops"],
        "dispatchers": [], "workers": 0, "next_fires": []}
    assert cli.json("status", "--board", "ops")["total"] == 0
    text = cli.ok("status").stdout
    assert "paused globally" in text and "no dispatcher" in text
    cli.ok("resume")
    cli.ok("resume", "-b", "ops")
    status = cli.json("status")
    assert (status["paused_globally"], status["paused_boards"]) == (False, [])
    assert "spawning: on" in cli.ok("status").stdout


def test_boards_list_and_create(cli: Cli) -> None:
    assert cli.ok("boards", "create", "ops").stdout == "board 'ops' created\n"
    assert cli.ok("boards", "create", "ops").stdout == "board 'ops' already exists\n"
    cli.add("a", "--board", "ops")
    assert cli.json("boards", "list") == {"boards": [
        {"name": "default", "paused": False, "cards": 0, "on_dependency_failure": "block"},
        {"name": "ops", "paused": False, "cards": 1, "on_dependency_failure": "block"}]}
    assert "ops  1 card" in cli.ok("boards").stdout


def test_board_text_and_json(cli: Cli) -> None:
    cli.add("a", "--priority", "3")
    cli.add("b")
    cli.ok("complete", "2", "--summary", "x")
    snap = cli.json("board")
    assert set(snap) == {"board", "paused", "paused_globally", "dispatchers", "counts",
                         "columns", "cursor", "pending_approvals", "failing_notifications"}
    assert snap["counts"]["ready"] == 1 and snap["counts"]["done"] == 1
    assert [c["id"] for c in snap["columns"]["ready"]] == [1]
    assert set(snap["columns"]["ready"][0]) == {
        "id", "title", "priority", "status", "profile", "created_by", "created_at",
        "updated_at", "attempt", "heartbeat_at", "progress", "activity", "due_at",
        "blocked_because"}
    text = cli.ok("board").stdout
    assert "board default · 2 cards · no dispatcher" in text
    assert "#1 p3" in text


def test_no_command_prints_help(cli: Cli) -> None:
    result = CliRunner().invoke(app, [])
    assert result.exit_code == 0
    assert "Usage" in result.stdout


def test_gc_runs_and_refuses_a_bad_age(cli: Cli) -> None:
    cli.add("fresh")
    assert cli.json("gc", "--older-than", "30d")["archived"] == 0
    assert "archived 0 card(s)" in cli.ok("gc").stdout
    error = cli.fails("gc", "--older-than", "soon")
    assert error.count("\n") <= 1 and "Traceback" not in error
