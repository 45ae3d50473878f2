"""The worker's plan: what `kanban context` previews is what the worker runs with."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanban.attachments import Attachments
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.skills import UnknownSkill
from kanban.state.config_parse import parse_config
from kanban.tools.scope import WorkerScope
from kanban.worker.plan import prepare_run, preview_run, toolbox_for


def write_skill(home: Path, name: str) -> None:
    folder = home / "skills" / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\ndescription: the {name} skill\n---\nDo {name}.\n")
    (folder / "extra.txt").write_text("more")


def test_preview_and_worker_plan_the_same_run(kb: Kanban, tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    write_skill(home, "tone")
    write_skill(home, "layout")
    config = parse_config({"profiles": {"writer": {"skills": ["layout"], "max_turns": 7}}})
    card = kb.add_card(NewCard("Write docs", goal="g", profile="writer", skills=("tone",)))
    files = Attachments(kb.db, home)
    source = tmp_path / "brief.md"
    source.write_text("brief")
    files.add(card.id, source)
    env = {"HOME": str(tmp_path)}
    seen = preview_run(files, card, config, env, home=home)
    ran = prepare_run(files, card, config, env, home=home, workspace=workspace)
    assert (seen.system, seen.opening, seen.toolsets, seen.limits, seen.model) == (
        ran.system, ran.opening, ran.toolsets, ran.limits, ran.model)
    assert seen.materials == ran.materials
    assert [s.name for s in ran.skills] == ["layout", "tone"]  # the profile's first
    assert ran.toolsets == ("kanban", "skills") and ran.limits.max_turns == 7
    assert "- layout: the layout skill" in ran.opening[0].content  # type: ignore[operator]
    assert ".kanban-card/attachments/brief.md" in ran.opening[1].content  # type: ignore[operator]
    assert (workspace / ".kanban-card/skills/tone/extra.txt").read_text() == "more"
    assert not (tmp_path / "nothing" / ".kanban-card").exists()
    scope = WorkerScope(kb, card.board, card.id, "t", 1)
    assert "skill_view" in [t.name for t in toolbox_for(ran, scope).specs()]


def test_only_a_root_card_of_a_skills_write_profile_gets_the_write_tools(
        kb: Kanban, tmp_path: Path) -> None:
    config = parse_config({"profiles": {"writer": {"skills_write": True}}})
    lead = kb.add_card(NewCard("Learn the steps", profile="writer"))
    child = kb.add_card(NewCard("Part", profile="writer", parent_id=lead.id))
    reader = kb.add_card(NewCard("Read", skills=("tone",)))
    write_skill(tmp_path, "tone")
    tools = {}
    for card in (lead, child, reader):
        plan = preview_run(Attachments(kb.db, tmp_path), card, config, {}, home=tmp_path)
        scope = WorkerScope(kb, card.board, card.id, "t", 1)
        tools[card.id] = {t.name for t in toolbox_for(plan, scope).specs()} & {
            "skill_view", "skill_write", "skill_patch"}
    assert tools[lead.id] == {"skill_view", "skill_write", "skill_patch"}
    assert tools[child.id] == set()  # never inherited by a delegated card
    assert tools[reader.id] == {"skill_view"}


def test_a_card_without_skills_or_files_touches_no_workspace(kb: Kanban, tmp_path: Path) -> None:
    card = kb.add_card(NewCard("plain"))
    plan = prepare_run(Attachments(kb.db, tmp_path), card, parse_config({}), {},
                       home=tmp_path, workspace=tmp_path)
    assert plan.toolsets == ("kanban",) and len(plan.opening) == 1
    assert not (tmp_path / ".kanban-card").exists()


def test_a_skill_gone_since_the_card_was_added_stops_the_plan(kb: Kanban,
                                                              tmp_path: Path) -> None:
    card = kb.add_card(NewCard("x", skills=("vanished",)))
    with pytest.raises(UnknownSkill, match="unknown skill 'vanished'"):
        prepare_run(Attachments(kb.db, tmp_path), card, parse_config({}), {}, home=tmp_path,
                    workspace=tmp_path)
