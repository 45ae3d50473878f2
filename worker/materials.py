"""What a worker finds in its workspace before it starts: its card's attachments and the
other files of its skills, copied read-only under `.kanban-card/`.

Copies, not links: the stored bytes stay out of the worker's reach, and nothing copied is
executable (files 0444). Whatever a previous attempt left in `.kanban-card/` is replaced,
and a symlink planted there is removed rather than followed. `materials_for` says where
everything goes without copying (for `kanban context`); `place_materials` copies it there.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from kanban.attachments import Attachments
from kanban.cards import card_attachments
from kanban.records import AttachmentRecord
from kanban.skill_files import read_skill_file
from kanban.skills import AGENT, MAX_SKILL_BYTES, Skill, shipped_files
from kanban.state.beneath import real_folder

MATERIALS_DIR = ".kanban-card"
ATTACHMENTS_DIR = f"{MATERIALS_DIR}/attachments"
SKILLS_DIR = f"{MATERIALS_DIR}/skills"
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Materials:
    """Where the card's attachments and skill files are, relative to the workspace."""

    attachments: list[tuple[AttachmentRecord, str]] = field(default_factory=list)
    skill_files: dict[str, list[str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.attachments and not any(self.skill_files.values())


def materials_for(records: Sequence[AttachmentRecord], skills: Sequence[Skill]) -> Materials:
    return Materials(
        [(r, f"{ATTACHMENTS_DIR}/{r.name}") for r in records],
        {s.name: [f"{SKILLS_DIR}/{s.name}/{rel}" for rel in shipped_files(s)] for s in skills})


def place_materials(attachments: Attachments, card_id: int, skills: Sequence[Skill],
                    workspace: Path) -> Materials:
    """Copy the card's attachments and its skills' files into `workspace`."""
    with attachments.db.read() as conn:
        records = card_attachments(conn, card_id)
    materials = materials_for(records, skills)
    if materials.empty and not (workspace / MATERIALS_DIR).exists():
        return materials  # nothing to place, nothing to clear
    _fresh_dir(workspace, MATERIALS_DIR)
    for record, rel in materials.attachments:
        _copy_read_only(attachments.path_of(record), workspace, rel)
    for skill in skills:
        prefix = f"{SKILLS_DIR}/{skill.name}/"
        for rel in materials.skill_files[skill.name]:
            member = rel.removeprefix(prefix)
            if skill.source == AGENT:  # a folder cards may write: nothing swapped in followed
                _write_read_only(read_skill_file(skill.folder, member, MAX_SKILL_BYTES),
                                 workspace, rel)
            else:
                _copy_read_only(skill.folder / member, workspace, rel)
    return materials


def _fresh_dir(workspace: Path, relative: str) -> None:
    """`workspace/relative` as an empty real folder (walked by descriptor: a symlink
    planted on the way is removed, never followed)."""
    held = real_folder(workspace, relative.split("/"))
    try:
        folder = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=held)
    finally:
        os.close(held)
    try:
        for name in os.listdir(folder):
            if stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                shutil.rmtree(name, dir_fd=folder)
            else:
                os.unlink(name, dir_fd=folder)
    finally:
        os.close(folder)


def _copy_read_only(src: Path, workspace: Path, rel: str) -> None:
    """Copy bytes only to `workspace/rel`; the copy is 0444, its folders are real folders,
    and nothing on the way is followed."""
    with open(src, "rb") as source, _created(workspace, rel) as out:
        while chunk := source.read(_CHUNK):
            out.write(chunk)


def _write_read_only(data: bytes, workspace: Path, rel: str) -> None:
    with _created(workspace, rel) as out:
        out.write(data)


@contextmanager
def _created(workspace: Path, rel: str) -> Iterator[BinaryIO]:
    """`workspace/rel` made new (0444 once written) in real folders, nothing followed."""
    *folders, name = rel.split("/")
    folder = real_folder(workspace, folders)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=folder)
    finally:
        os.close(folder)
    with os.fdopen(fd, "wb") as out:
        yield out
        os.fchmod(out.fileno(), 0o444)
