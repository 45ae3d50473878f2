"""`kanban list` and `kanban board` say why each blocked card is blocked: one line, cut,
controls spelled out."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from kanban.cli.plain import REASON_SHOWN
from kanban.service import Kanban
from tests.unit.cli.conftest import Cli

HOSTILE = "needs\nthe key \x1b]52;c;cm0gLXJmIH4=\x07 from ops \x9b2J\u202eevil"


def _plant_reason(cli: Cli, card_id: int, reason: str) -> None:
    """A reason as a worker's model might have left it (stored text is not re-checked)."""
    with closing(sqlite3.connect(cli.db_path)) as conn, conn:
        conn.execute("UPDATE card SET error = ? WHERE id = ?", (reason, card_id))


def test_a_blocked_card_lists_its_reason(cli: Cli, kanban: Kanban) -> None:
    card = cli.add("Pick a database")
    cli.ok("block", str(card), "--reason", "which database: sqlite or postgres?")
    cli.add("Unblocked neighbour")
    lines = cli.ok("list").stdout.splitlines()
    assert lines[1].endswith("Pick a database  — which database: sqlite or postgres?")
    assert lines[0].endswith("Unblocked neighbour")
    streamed = cli.ok("list", "--status", "blocked", "--all").stdout.splitlines()
    assert streamed == [lines[1]]


def test_a_long_reason_is_cut_to_one_short_line(cli: Cli, kanban: Kanban) -> None:
    card = cli.add("Long story")
    cli.ok("block", str(card), "--reason", "first line\n" + "why " * 200)
    line = cli.ok("list", "--status", "blocked").stdout
    assert line.count("\n") == 1
    reason = line.rstrip("\n").split("  — ", 1)[1]
    assert reason.startswith("first line why why") and reason.endswith("…")
    assert len(reason) <= REASON_SHOWN


def test_controls_in_a_stored_reason_never_reach_the_terminal(cli: Cli, kanban: Kanban) -> None:
    card = cli.add("Hostile")
    cli.ok("block", str(card), "--reason", "placeholder")
    _plant_reason(cli, card, HOSTILE)
    for args in (("list",), ("list", "--status", "blocked", "--all")):
        out = cli.ok(*args).stdout
        assert not any(c in out for c in "\x1b\x07\x9b\u202e"), out
        assert "— needs the key \\x1b]52;c;cm0gLXJmIH4=\\x07 from ops \\x9b2J\\u202eevil" in out


def test_json_carries_the_whole_reason(cli: Cli, kanban: Kanban) -> None:
    card = cli.add("Pick a database")
    reason = "which database? " + "x" * 300
    cli.ok("block", str(card), "--reason", reason)
    for args in (("list", "--status", "blocked"), ("list", "--status", "blocked", "--all")):
        listed = cli.json(*args)["cards"]
        assert [(c["id"], c["status"], c["error"]) for c in listed] == \
            [(card, "blocked", reason)]


def test_the_board_says_why_a_card_is_blocked(cli: Cli, kanban: Kanban) -> None:
    card = cli.add("Pick a database")
    cli.ok("block", str(card), "--reason", "which database: sqlite or postgres?")
    hostile = cli.add("Hostile")
    cli.ok("block", str(hostile), "--reason", "placeholder")
    _plant_reason(cli, hostile, HOSTILE + " " + "why " * 100)
    neighbour = cli.add("Neighbour")
    out = cli.ok("board").stdout  # a pipe: the plain lines
    assert "Pick a database  — which database: sqlite or postgres?" in out
    line = next(x for x in out.splitlines() if "Hostile" in x)
    assert not any(c in line for c in "\x1b\x07\x9b\u202e"), line
    assert "— needs the key \\x1b]52;c;cm0gLXJmIH4=\\x07" in line and line.endswith("…")
    blocked = cli.json("board")["columns"]["blocked"]
    assert {c["id"]: c["blocked_because"] for c in blocked} == {
        card: "which database: sqlite or postgres?", hostile: (HOSTILE + " " + "why " * 100)[:200]}
    ready = cli.json("board")["columns"]["ready"]
    assert [(c["id"], c["blocked_because"]) for c in ready] == [(neighbour, None)]


def test_show_calls_a_block_reason_a_reason_and_a_failure_an_error(
        cli: Cli, kanban: Kanban) -> None:
    blocked = cli.add("Pick a database")
    cli.ok("block", str(blocked), "--reason", "which database?")
    shown = cli.ok("show", str(blocked)).stdout
    assert "── blocked because ──\nwhich database?" in shown and "── error ──" not in shown
    failed = cli.add("Migrate")
    _plant_reason(cli, failed, "exit 2: no such table")  # as a failed run leaves it
    with closing(sqlite3.connect(cli.db_path)) as conn, conn:
        conn.execute("UPDATE card SET status = 'failed' WHERE id = ?", (failed,))
    assert "── error ──\nexit 2: no such table" in cli.ok("show", str(failed)).stdout
