"""`kanban add --key / --at / --in / --skill`, and how scheduled cards are shown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from kanban.service import Kanban
from tests.unit.cli.conftest import Cli


def test_add_with_a_key_twice_returns_the_first_card(cli: Cli) -> None:
    first = cli.ok("add", "nightly report", "--key", "report-1")
    assert first.stdout == "#1\n" and first.stderr == ""
    again = cli.ok("add", "nightly report", "--key", "report-1")
    assert again.stdout == "#1\n"
    assert "already holds key 'report-1'" in again.stderr
    assert cli.json("add", "nightly report", "--key", "report-1")["created"] is False
    assert cli.json("add", "other", "--key", "report-2")["created"] is True
    assert sorted(c["id"] for c in cli.json("list")["cards"]) == [1, 2]


def test_add_in_schedules_the_card(cli: Cli, kanban: Kanban) -> None:
    before = datetime.now(UTC)
    card = cli.json("add", "later", "--in", "2h")
    assert card["status"] == "scheduled" and card["key"] is None
    due = datetime.fromisoformat(card["run_after"])
    assert before + timedelta(hours=2) <= due <= datetime.now(UTC) + timedelta(hours=2)
    text = cli.ok("show", str(card["id"])).stdout
    assert "scheduled for" in text and "(in 2h)" in text
    board = cli.ok("board").stdout
    assert "scheduled 1" in board and "⏲ in 2h" in board
    assert cli.json("board")["columns"]["scheduled"][0]["due_at"] == card["run_after"]


def test_add_at_takes_an_iso_time(cli: Cli) -> None:
    at = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    card = cli.json("add", "later", "--at", at.isoformat())
    assert datetime.fromisoformat(card["run_after"]) == at


def test_bad_schedules_are_refused_cleanly(cli: Cli) -> None:
    assert "not both" in cli.fails("add", "x", "--at", "17:00", "--in", "1h", code=2)
    assert "cannot read '2 fortnights'" in cli.fails("add", "x", "--in", "2 fortnights")
    assert "in the past" in cli.fails("add", "x", "--at", "2001-01-01T00:00Z")


def test_an_unknown_skill_is_refused_at_add_time(cli: Cli) -> None:
    assert "unknown skill 'nope'" in cli.fails("add", "x", "--skill", "nope")


def test_a_known_skill_is_stored_on_the_card(cli: Cli, kanban: Kanban) -> None:
    assert kanban.db.path is not None
    folder = Path(kanban.db.path).parent / "skills" / "release-notes"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: release-notes\ndescription: Write release "
                                     "notes from a changelog\n---\nStart with the headline.\n")
    card = cli.json("add", "notes", "--skill", "release-notes")
    assert card["skills"] == "release-notes"
    assert "skills release-notes" in cli.ok("show", str(card["id"])).stdout


def test_a_profiles_unknown_skill_is_refused_at_add_time_too(cli: Cli, kanban: Kanban) -> None:
    assert kanban.db.path is not None
    (Path(kanban.db.path).parent / "config.toml").write_text(
        '[profiles.writer]\nskills = ["house-style"]\n')
    assert "unknown skill 'house-style'" in cli.fails("add", "x", "--profile", "writer")
