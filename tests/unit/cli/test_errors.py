"""Bad input: one line on stderr, exit 1 (2 for usage errors), no traceback, nothing changed."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

from kanban.cards import NewCard
from kanban.cli.app import app
from kanban.service import Kanban
from tests.unit.cli.conftest import Cli


@pytest.fixture
def two_cards(cli: Cli, kanban: Kanban) -> Cli:
    kanban.add_card(NewCard("a"))
    kanban.add_card(NewCard("b", depends_on=[1]))
    return cli


def test_unknown_card(two_cards: Cli) -> None:
    for command in (["show", "99"], ["log", "99"], ["comment", "99", "hi"],
                    ["complete", "99", "--summary", "x"], ["block", "99", "--reason", "x"],
                    ["unblock", "99"], ["cancel", "99"], ["retry", "99"], ["archive", "99"],
                    ["link", "99", "1"], ["link", "1", "99"], ["unlink", "99", "1"]):
        assert "no card #99" in two_cards.fails(*command), command


@pytest.mark.parametrize(("args", "message"), [
    (["add", ""], "title must not be empty"),
    (["add", "   "], "title must not be empty"),
    (["add", "x" * 501], "title is 501 characters; the limit is 500"),
    (["add", "two\nlines"], "title must be one line"),
    (["add", "bell\x07"], "title contains control characters"),
    (["add", "ok", "--goal", "g" * 20_001], "goal is 20,001 characters; the limit is 20,000"),
    (["add", "ok", "--priority", "1000001"], "priority must be between"),
    (["add", "ok", "--max-attempts", "0"], "max attempts must be between 1 and 100"),
    (["add", "ok", "--timeout", "0.5"], "timeout must be between 1 and 604800"),
    (["add", "ok", "--depends-on", "42"], "no card #42"),
    (["add", "ok", "--profile", "coder"],
     "unknown profile 'coder' (known: bash, default, general, lead)"),
    (["comment", "1", " "], "comment must not be empty"),
])
def test_invalid_card_values(two_cards: Cli, args: list[str], message: str) -> None:
    assert message in two_cards.fails(*args)


def test_malformed_config(two_cards: Cli) -> None:
    (two_cards.db_path.parent / "config.toml").write_text("[profiles\n")
    assert "malformed config" in two_cards.fails("add", "ok", "--profile", "x")


def test_self_link(two_cards: Cli) -> None:
    assert two_cards.fails("link", "1", "1") == "a card cannot depend on itself (#1)"


def test_cycle_names_the_cycle(two_cards: Cli) -> None:
    two_cards.add("c", "--depends-on", "2")
    message = two_cards.fails("link", "1", "3")
    assert message == "linking #1 to #3 would close a cycle: #1 → #3 → #2 → #1"


def test_link_across_boards(two_cards: Cli) -> None:
    two_cards.ok("boards", "create", "ops")
    two_cards.add("elsewhere", "--board", "ops")
    assert "dependencies stay on one board" in two_cards.fails("link", "1", "3")
    assert "dependencies stay on one board" in two_cards.fails(
        "add", "x", "--board", "ops", "--depends-on", "1")


def test_unlink_missing_dependency(two_cards: Cli) -> None:
    assert two_cards.fails("unlink", "1", "2") == "#1 does not depend on #2"


def test_forbidden_transitions(two_cards: Cli) -> None:
    two_cards.ok("complete", "1", "--summary", "x")
    assert "cannot complete #1: it is done" in two_cards.fails("complete", "1", "--summary", "y")
    assert "cannot unblock #1" in two_cards.fails("unblock", "1")
    assert "cannot archive #2" in two_cards.fails("archive", "2")
    assert "cannot retry #2" in two_cards.fails("retry", "2")
    assert "reason must not be empty" in two_cards.fails("block", "2", "--reason", "")


def test_unknown_board(two_cards: Cli) -> None:
    for command in (["add", "x", "--board", "nope"], ["board", "--board", "nope"],
                    ["list", "--board", "nope"], ["pause", "--board", "nope"],
                    ["status", "--board", "nope"]):
        assert "no board named 'nope'" in two_cards.fails(*command), command
    assert "invalid board name" in two_cards.fails("boards", "create", "bad name!")
    assert "no board named 'nope'" in two_cards.fails("board", env={"KANBAN_BOARD": "nope"})


@pytest.mark.parametrize("args", [
    ["show", "abc"], ["show", "1.5"], ["link", "1", "x"], ["add", "t", "--depends-on", "x"],
    ["add", "t", "--priority", "high"], ["list", "--status", "sleeping"], ["nope"],
    ["add"], ["block", "1"], ["show", "1", "--bogus"], ["--bogus", "list"],
    ["board", "--interval", "0"],
])
def test_usage_errors_exit_2(two_cards: Cli, args: list[str]) -> None:
    message = two_cards.fails(*args, code=2)
    assert "--help" in message


def test_missing_database(tmp_path: Path) -> None:
    runner = CliRunner()
    for target in (tmp_path / "nonexistent" / "x.db", Path("/nonexistent/x.db")):
        result = runner.invoke(app, ["--db", str(target), "list"])
        assert result.exit_code == 1
        assert result.stderr == (f"kanban: error: no kanban database at {target} (from --db): "
                                 f"create it with `kanban --db {target} init`\n")
        assert not target.exists()


def test_missing_database_from_env(tmp_path: Path) -> None:
    target = tmp_path / "gone.db"
    result = CliRunner().invoke(app, ["board"], env={"KANBAN_DB": str(target)})
    assert result.exit_code == 1
    assert "no kanban database at" in result.stderr


def test_unwritable_location(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = CliRunner().invoke(app, ["--db", str(blocker / "x.db"), "init"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"kanban: error: cannot create database at {blocker}/x.db")
    assert result.stderr.count("\n") == 1


def test_not_a_kanban_database(tmp_path: Path) -> None:
    runner = CliRunner()
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not SQLite at all " * 100)
    result = runner.invoke(app, ["--db", str(text), "list"])
    assert result.exit_code == 1
    assert result.stderr.startswith("kanban: error: the database file is corrupt or not a "
                                    "kanban database")
    assert result.stderr.count("\n") == 1
    foreign = tmp_path / "other.db"
    with closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
        conn.commit()
    result = runner.invoke(app, ["--db", str(foreign), "board"])
    assert result.exit_code == 1
    assert result.stderr == (f"kanban: error: {foreign} is not a kanban database "
                             "(it holds other tables)\n")
    result = runner.invoke(app, ["--db", str(tmp_path), "list"])
    assert result.stderr == f"kanban: error: {tmp_path} is a directory, not a database file\n"


def test_database_from_newer_version(cli: Cli) -> None:
    with closing(sqlite3.connect(cli.db_path)) as conn:
        conn.execute("INSERT INTO schema_migration (id, name, applied_at) "
                     "VALUES (9999, 'future', '2099-01-01 00:00:00')")
        conn.commit()
    message = cli.fails("list")
    assert "was written by a newer kanban (schema 9999" in message
    assert "upgrade kanban" in message


def test_unexpected_error_is_one_line(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from kanban.service import Kanban

    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Kanban, "card_page", boom)
    result = cli("list")
    assert result.exit_code == 1
    assert result.stderr == ("kanban: error: unexpected RuntimeError: disk on fire "
                             "(set KANBAN_DEBUG=1 for the traceback)\n")
    debug = cli("list", env={"KANBAN_DEBUG": "1"})
    assert isinstance(debug.exception, RuntimeError)


def test_keyboard_interrupt_exits_130_quietly(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from kanban.service import Kanban

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Kanban, "card_page", interrupted)
    result = cli("list")
    assert (result.exit_code, result.stderr.strip()) == (130, "")


def test_main_reports_errors_as_one_line(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from kanban.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--db", str(tmp_path / "none.db"), "show", "1"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith("kanban: error: no kanban database at")
    with pytest.raises(SystemExit) as exit_info:
        main(["show", "x"])
    assert exit_info.value.code == 2
