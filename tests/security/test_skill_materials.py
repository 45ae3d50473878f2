"""An agent-written skill's files are copied into every workspace of a card given the skill.
The agent-skill folder is one a card's commands may reach (an unsandboxed card, a `dir:`
workspace on it), so between the worker listing a skill's files and copying them, another
card's command swaps a listed file for a symlink to a secret, or for a FIFO that would hold
the worker's start forever. Neither is followed: the start fails, saying why, and no secret
reaches the workspace.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kanban import skills as skills_module
from kanban.agent_skills import Author, write_skill
from kanban.attachments import Attachments
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.skill_files import UnsafeSkillPath
from kanban.skills import SkillCatalog, agent_skills
from kanban.worker import materials
from tests.support.db import open_sqlite

SECRET = b"the-worker-users-private-key"


@pytest.fixture
def board(tmp_path: Path) -> Iterator[tuple[Path, Attachments, int]]:
    home = tmp_path / "home"
    home.mkdir()
    db = open_sqlite(home / "kanban.db")
    kb = Kanban(db)
    card = kb.add_card(NewCard("uses a skill")).id
    write_skill(home, SkillCatalog(), Author(1, "writer", "openai:test-model"), name="deploy",
                description="how we deploy", body="Read notes/steps.md.",
                files={"notes/steps.md": "1. build\n2. ship\n"}, now=datetime.now(UTC))
    try:
        yield home, Attachments(db, home, clock=kb.clock), card
    finally:
        db.dispose()


def swap_after_listing(monkeypatch: pytest.MonkeyPatch,
                       swap: Callable[[Path], None]) -> None:
    """The race: the worker lists the skill's files, then a command changes one."""
    listed = skills_module.shipped_files

    def listing_then_swap(skill: skills_module.Skill) -> list[str]:
        found = listed(skill)
        swap(skill.folder / "notes" / "steps.md")
        return found

    monkeypatch.setattr(materials, "shipped_files", listing_then_swap)


def file_to_link(path: Path, secrets: Path) -> None:
    path.unlink()
    path.symlink_to(secrets / "steps.md")


def folder_to_link(path: Path, secrets: Path) -> None:
    path.unlink()
    path.parent.rmdir()
    path.parent.symlink_to(secrets)


@pytest.mark.parametrize(("swap", "named"), [(file_to_link, "steps.md"),
                                             (folder_to_link, "notes")])
def test_a_file_or_folder_swapped_for_a_symlink_is_not_followed(
        board: tuple[Path, Attachments, int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, swap: Callable[[Path, Path], None],
        named: str) -> None:
    home, attachments, card = board
    secrets = tmp_path / "ssh"  # the worker user's, outside the agent-skill folder
    secrets.mkdir()
    (secrets / "steps.md").write_bytes(SECRET)
    swap_after_listing(monkeypatch, lambda path: swap(path, secrets))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (skill,) = agent_skills(home)
    with pytest.raises(UnsafeSkillPath, match=named):
        materials.place_materials(attachments, card, [skill], workspace)
    assert not any(SECRET in p.read_bytes() for p in workspace.rglob("*") if p.is_file())


def test_a_file_swapped_for_a_fifo_does_not_hold_the_start(
        board: tuple[Path, Attachments, int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    home, attachments, card = board

    def to_fifo(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    swap_after_listing(monkeypatch, to_fifo)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (skill,) = agent_skills(home)
    raised: list[BaseException] = []

    def start() -> None:
        try:
            materials.place_materials(attachments, card, [skill], workspace)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            raised.append(exc)

    worker = threading.Thread(target=start, daemon=True)
    worker.start()
    worker.join(30)  # a bound on a hang, not a timing: it returns at once or never
    assert not worker.is_alive(), "the worker's start waits on the planted FIFO"
    assert len(raised) == 1 and isinstance(raised[0], UnsafeSkillPath), raised


def test_an_untouched_skill_is_copied(board: tuple[Path, Attachments, int],
                                      tmp_path: Path) -> None:
    home, attachments, card = board
    workspace = tmp_path / "ws"
    workspace.mkdir()
    placed = materials.place_materials(attachments, card, agent_skills(home), workspace)
    rel = ".kanban-card/skills/deploy/notes/steps.md"
    assert placed.skill_files == {"deploy": [rel]}
    assert (workspace / rel).read_text() == "1. build\n2. ship\n"
