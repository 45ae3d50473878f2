"""The skill curator with the clock moved forward (an injected `now`): an unused
agent-written skill goes stale, then to the archive after a backup; used, pinned and
hand-written skills stay; a dry run changes nothing; an archived skill comes back."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kanban import skill_usage
from kanban.agent_skills import Author, write_skill
from kanban.service import Kanban
from kanban.skill_curator import curate, restore
from kanban.skills import SkillCatalog, load_catalog
from kanban.state.config import SkillSettings
from kanban.state.db import open_database
from kanban.state.paths import DbLocation
from tests.support.procs import kanban

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SETTINGS = SkillSettings(stale_after_days=30, archive_after_days=60)
HAND = "---\nname: {0}\ndescription: by hand\n---\nDo it by hand.\n"


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Kanban]:
    db = open_database(DbLocation(str(tmp_path / "kanban.db"), "flag"), create=True)
    try:
        yield Kanban(db)
    finally:
        db.dispose()


def agent_writes(home: Path, kb: Kanban, name: str, at: datetime) -> None:
    write_skill(home, SkillCatalog(), Author(1, "writer", "scripted:x"), name=name,
                description=f"{name} steps", body=f"How to {name}.", files=None, now=at)
    with kb.db.write() as conn:
        skill_usage.record(conn, [name], "write", now=at, card_id=1, profile="writer")


def used(kb: Kanban, name: str, at: datetime) -> None:
    with kb.db.write() as conn:
        skill_usage.record(conn, [name], "view", now=at, card_id=2, profile="reader")


def states(kb: Kanban) -> dict[str, str]:
    with kb.db.read() as conn:
        return {n: u.shown_state() for n, u in skill_usage.usage(conn).items()}


def test_the_curator_marks_then_archives_only_unused_agent_skills(kb: Kanban,
                                                                  tmp_path: Path) -> None:
    home = tmp_path
    for name in ("unused", "used", "pinned"):
        agent_writes(home, kb, name, T0)
    hand = home / "agent-skills" / "handmade"  # put in the agent folder by a person
    hand.mkdir()
    (hand / "SKILL.md").write_text(HAND.format("handmade"))
    os.utime(hand / "SKILL.md", (0, 0))  # untouched since 1970
    project = home / "skills" / "project-one"
    project.mkdir(parents=True)
    (project / "SKILL.md").write_text(HAND.format("project-one"))
    with kb.db.write() as conn:
        skill_usage.set_state(conn, "pinned", pinned=True, now=T0)
    used(kb, "used", T0 + timedelta(days=35))

    # A dry run at day 40 says what it would do and changes nothing.
    before = states(kb)
    dry = curate(kb.db, home, SETTINGS, T0 + timedelta(days=40), dry_run=True)
    assert [(m.name, m.state) for m in dry.moves] == [("unused", "stale")]
    assert dry.backup is None and not (home / "skill-backups").exists()
    assert states(kb) == before

    marked = curate(kb.db, home, SETTINGS, T0 + timedelta(days=40))
    assert [(m.name, m.state) for m in marked.moves] == [("unused", "stale")]
    assert states(kb)["unused"] == "stale"
    assert (home / "agent-skills" / "unused" / "SKILL.md").is_file()  # stale stays listed

    used(kb, "used", T0 + timedelta(days=65))
    archived = curate(kb.db, home, SETTINGS, T0 + timedelta(days=70))
    assert [(m.name, m.state) for m in archived.moves] == [("unused", "archived")]
    assert not (home / "agent-skills" / "unused").exists()
    assert (home / "agent-skills" / ".archive" / "unused" / "SKILL.md").is_file()
    assert {"used", "pinned", "handmade"} <= set(os.listdir(home / "agent-skills"))
    assert project.is_dir()
    assert states(kb) == {"unused": "archived", "used": "active", "pinned": "pinned"}
    assert "unused" not in load_catalog(home, packages=False).skills
    # The backup holds the collection as it was before the move.
    assert archived.backup is not None
    with tarfile.open(archived.backup) as tar:
        assert "agent-skills/unused/SKILL.md" in tar.getnames()
    # A year on: the used one has gone unused too; the pinned and the hand-written stay.
    later = curate(kb.db, home, SETTINGS, T0 + timedelta(days=400))
    assert [(m.name, m.state) for m in later.moves] == [("used", "archived")]
    assert {"pinned", "handmade"} <= set(os.listdir(home / "agent-skills"))

    # Restored from the archive, then (the archive lost) from the backup.
    assert restore(kb.db, home, "unused", T0 + timedelta(days=71)) == "the archive"
    assert states(kb)["unused"] == "active"
    shutil.move(home / "agent-skills" / "unused", tmp_path / "elsewhere")
    assert restore(kb.db, home, "unused", T0 + timedelta(days=72)).endswith(".tar.gz")
    assert "How to unused." in (home / "agent-skills" / "unused" / "SKILL.md").read_text()


def test_kanban_skills_curate_dry_run_changes_nothing(kb: Kanban, tmp_path: Path) -> None:
    write_skill(tmp_path, SkillCatalog(), Author(1, "writer", "scripted:x"), name="old",
                description="old steps", body="Old.", files=None, now=T0)
    skill_file = tmp_path / "agent-skills" / "old" / "SKILL.md"
    os.utime(skill_file, (0, 0))  # written long ago, never used since
    db = tmp_path / "kanban.db"
    dry = kanban(db, "skills", "curate", "--dry-run")
    assert dry.stdout.startswith("would mark old archived (unused for ")
    assert (tmp_path / "agent-skills" / "old").is_dir()
    assert not (tmp_path / "skill-backups").exists()
    assert "active, 0 uses, last never" in kanban(db, "skills").stdout
    done = kanban(db, "skills", "curate")
    assert done.stdout.startswith("marked old archived") and "backup:" in done.stderr
    assert "old (agent): archived" in kanban(db, "skills").stdout
    assert kanban(db, "skills", "restore", "old").stdout == "restored old from the archive\n"
    for bad_args in (("pin", "../x"), ("pin",), ("old", "--dry-run"), ("a", "b"),
                     ("pin", "nosuch"), ("unpin", "nosuch")):
        bad = kanban(db, "skills", *bad_args, check=False)
        assert bad.returncode == 1 and bad.stderr.startswith("kanban: error: "), bad_args
        assert bad.stderr.count("\n") == 1, bad.stderr
    assert kanban(db, "skills", "pin", "old").stdout == "pinned old\n"
    assert "old (agent): old steps — pinned, " in kanban(db, "skills").stdout


def test_the_dispatcher_runs_the_curator_on_its_slow_tick(kb: Kanban, tmp_path: Path) -> None:
    write_skill(tmp_path, SkillCatalog(), Author(1, "writer", "scripted:x"), name="old",
                description="old steps", body="Old.", files=None, now=T0)
    os.utime(tmp_path / "agent-skills" / "old" / "SKILL.md", (0, 0))
    kanban(tmp_path / "kanban.db", "dispatch", "--once")
    assert (tmp_path / "agent-skills" / ".archive" / "old" / "SKILL.md").is_file()
    assert len(list((tmp_path / "skill-backups").glob("agent-skills-*.tar.gz"))) == 1


def test_a_skill_a_profile_a_waiting_card_or_a_cron_job_names_is_kept(
        kb: Kanban, tmp_path: Path) -> None:
    """Archived, such a skill would fail the next card given it (an unknown skill fails a
    card at once): a quarterly job's skill is not 'unused' between its runs."""
    from kanban.cards import NewCard
    from kanban.skill_curator import named_by_profiles
    from kanban.state.config_file import load_config

    for name in ("profiled", "carded", "cronned", "plain"):
        agent_writes(tmp_path, kb, name, T0)
    (tmp_path / "config.toml").write_text('[profiles.quarterly]\nmodel = "scripted:x"\n'
                                          'skills = ["profiled"]\n')
    kb.ensure_board("default")
    kb.add_card(NewCard("next quarter's report", skills=("carded",)))
    finished = kb.add_card(NewCard("last quarter's report", skills=("plain",))).id
    kanban(tmp_path / "kanban.db", "cancel", str(finished))  # a finished card keeps nothing
    kanban(tmp_path / "kanban.db", "cron", "add", "quarterly", "-s", "0 9 1 */3 *",
           "--goal", "the report", "--skill", "cronned")
    named = named_by_profiles(load_config(tmp_path / "config.toml"))
    assert named == {"profiled"}
    later = T0 + timedelta(days=400)
    done = curate(kb.db, tmp_path, SETTINGS, later, named=named)
    assert [(m.name, m.state) for m in done.moves] == [("plain", "archived")]
    assert states(kb) == {"profiled": "active", "carded": "active", "cronned": "active",
                          "plain": "archived"}
    # From the command line, with the board's config: the same.
    shutil.move(tmp_path / "agent-skills" / ".archive" / "plain", tmp_path / "agent-skills")
    with kb.db.write() as conn:
        skill_usage.set_state(conn, "plain", state="active", now=later)
    os.utime(tmp_path / "agent-skills" / "plain" / "SKILL.md", (0, 0))
    dry = kanban(tmp_path / "kanban.db", "skills", "curate", "--dry-run", "--json").stdout
    assert json.loads(dry)["moves"] == [{"name": "plain", "state": "archived",
                                         "idle_days": json.loads(dry)["moves"][0]["idle_days"]}]
