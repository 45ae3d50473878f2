"""Skills: SKILL.md front matter, where skills are found, and which one wins."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kanban.service import Kanban
from kanban.skills import UnknownSkill, load_catalog, shipped_files
from kanban.state.db import open_database
from kanban.state.paths import DbLocation
from kanban.tools.scope import WorkerScope
from kanban.tools.skill_tools import skill_view


def skill(root: Path, folder: str, text: str, **files: str) -> Path:
    path = root / folder
    path.mkdir(parents=True)
    (path / "SKILL.md").write_text(text)
    for name, body in files.items():
        (path / name).write_text(body)
    return path


def env_for(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def test_front_matter_and_body(tmp_path: Path) -> None:
    skill(tmp_path / "skills", "notes", "---\nname: release-notes\ndescription: >\n  Write "
          "release notes:\n  grouped, short.\ntags: [docs, 2]\n---\n# Body\n\nDo this.\n",
          **{"template.md": "x", ".hidden": "no"})
    catalog = load_catalog(tmp_path, env_for(tmp_path), packages=False)
    s = catalog.get("release-notes")
    assert (s.description, s.tags, s.source) == ("Write release notes: grouped, short.",
                                                 ("docs", "2"), "project")
    assert s.body == "# Body\n\nDo this."
    assert shipped_files(s) == ["template.md"]


def test_the_folder_name_is_the_default_name_and_tags_may_be_a_string(tmp_path: Path) -> None:
    skill(tmp_path / "skills", "tone", "---\ndescription: House tone\ntags: a, b\n---\nx")
    assert load_catalog(tmp_path, env_for(tmp_path), packages=False).get("tone").tags == (
        "a", "b")


@pytest.mark.parametrize(("text", "problem"), [
    ("no front matter", "no front matter"),
    ("---\nname: x\n---\nbody", "needs a description"),
    ("---\nname: [x\ndescription: y\n---\n", "bad front matter"),
    ("---\n- a list\n---\n", "must be a mapping"),
    ("---\nname: 'bad name'\ndescription: y\n---\n", "name must be"),
    ("---\ndescription: y\ntags: {a: 1}\n---\n", "tags must be"),
])
def test_a_broken_skill_is_reported_and_skipped(tmp_path: Path, text: str,
                                                problem: str) -> None:
    skill(tmp_path / "skills", "bad", text)
    skill(tmp_path / "skills", "good", "---\ndescription: fine\n---\n")
    catalog = load_catalog(tmp_path, env_for(tmp_path), packages=False)
    assert list(catalog.skills) == ["good"]
    (reported,) = catalog.problems
    assert problem in reported and "bad/SKILL.md" in reported


def test_project_beats_user_beats_package_beats_agent(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_for(tmp_path)
    # An agent wrote "packaged" before the package that brings one was installed: the
    # agent's must not pass for what a person chose to install (nor a person's for the agent's)
    skill(tmp_path / "agent-skills", "packaged",
          "---\nname: packaged\ndescription: by an agent\n---\nAgent body\n")
    skill(tmp_path / "agent-skills", "own", "---\nname: own\ndescription: agent only\n---\n")
    skill(tmp_path / "skills", "a", "---\nname: shared\ndescription: project\n---\n")
    skill(tmp_path / "config" / "kanban" / "skills", "b",
          "---\nname: shared\ndescription: user\n---\n")
    skill(tmp_path / "config" / "kanban" / "skills", "c",
          "---\nname: mine\ndescription: user only\n---\n")
    # An installed package registering a folder of skills under `kanban.skills`.
    site = tmp_path / "site"
    pkg_skills = site / "demo_skills_pkg" / "skills"
    skill(pkg_skills, "p", "---\nname: packaged\ndescription: from a package\n---\nP body\n")
    skill(pkg_skills, "q", "---\nname: mine\ndescription: package copy\n---\n")
    (site / "demo_skills_pkg" / "__init__.py").write_text(
        "from pathlib import Path\nSKILLS = Path(__file__).parent / 'skills'\n")
    dist = site / "demo_skills_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-skills-pkg\n"
                                   "Version: 1.0\n")
    (dist / "entry_points.txt").write_text("[kanban.skills]\ndemo = demo_skills_pkg:SKILLS\n"
                                           "broken = demo_skills_pkg:MISSING\n")
    monkeypatch.syspath_prepend(str(site))
    catalog = load_catalog(tmp_path, env)
    assert catalog.get("shared").description == "project"
    assert catalog.get("mine").description == "user only"
    assert catalog.get("packaged").source == "package:demo"
    assert catalog.get("packaged").body == "P body"
    assert catalog.get("own").source == "agent"
    assert any("package:broken: cannot load" in p for p in catalog.problems)
    sys.modules.pop("demo_skills_pkg", None)


def test_unknown_names_are_all_named(tmp_path: Path) -> None:
    skill(tmp_path / "skills", "a", "---\ndescription: d\n---\n")
    catalog = load_catalog(tmp_path, env_for(tmp_path), packages=False)
    with pytest.raises(UnknownSkill, match=r"unknown skills 'x', 'y' \(known: a\)"):
        catalog.require(["a", "x", "y"])


def test_skill_view_shows_only_the_cards_skills(tmp_path: Path) -> None:
    skill(tmp_path / "skills", "tone", "---\ndescription: d\n---\nShort sentences.\n",
          **{"examples.md": "e"})
    tone = load_catalog(tmp_path, env_for(tmp_path), packages=False).get("tone")
    # A board to record the view in (issue 33: `kanban skills` counts uses).
    db = open_database(DbLocation(str(tmp_path / "kanban.db"), "flag"), create=True)
    scope = WorkerScope(Kanban(db), "default", 1, "t", 1, skills={"tone": tone},
                        skill_files={"tone": [".kanban-card/skills/tone/examples.md"]})
    shown = skill_view({"name": "tone"}, scope)
    with db.read() as conn:
        assert conn.all("SELECT skill, kind, card_id FROM skill_use") == [("tone", "view", 1)]
    db.dispose()
    assert not shown.is_error
    assert "Short sentences." in shown.content
    assert ".kanban-card/skills/tone/examples.md" in shown.content
    missing = skill_view({"name": "other"}, scope)
    assert missing.is_error and "yours: tone" in missing.content
