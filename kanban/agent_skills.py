"""Skills agents write and refine while they work (issue 33), in `.kanban/agent-skills/`.

What a model sends is hostile input: names are one folder name, sizes are bounded, text
holds no control characters or terminal escapes, files are never executable, nothing is
written through a symlink (kanban.skill_files), and a skill a person put in place (another
source, or an agent-skill folder without `written_by`) or pinned is never overwritten.
A patch keeps the previous SKILL.md under `.versions/`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kanban import skill_files as fs
from kanban import validation
from kanban.errors import ConfigError, ValidationError
from kanban.skills import (
    AGENT,
    SKILL_FILE,
    SkillCatalog,
    front_matter,
    split_front_matter,
)
from kanban.textsafety import has_controls

MAX_BODY = 64 * 1024  # characters of a SKILL.md body
MAX_DESCRIPTION = 500
MAX_FILES = 20  # other files one write may add
MAX_FILE = 64 * 1024  # characters of one of them
MAX_DEPTH = 3  # folders of a file's path, the file included
MAX_AGENT_SKILLS = 200  # skills in the agent-skill folder: each card start reads them all
MAX_WRITES_PER_CARD = 10  # new skills one card may write
MAX_VERSIONS = 50  # earlier versions one skill keeps: past it, a person decides
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Author:
    """Who is writing: the card, its profile and model."""

    card_id: int
    profile: str
    model: str


def text(value: str, what: str, limit: int, *, required: bool = False) -> str:
    """Bounded text without control characters, carriage returns or terminal escapes."""
    validation.text(value, what, limit, required=required)
    if has_controls(value):
        raise ValidationError(f"{what} contains control characters (a carriage return too)")
    return value


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _PART.fullmatch(name):
        raise ValidationError("a skill name is 1-64 letters, digits, '.', '_' or '-', "
                              "starting with a letter or digit")
    return name


def check_files(files: Any) -> dict[tuple[str, ...], bytes]:
    """A skill's other files by path: each part a plain name, text without controls."""
    if files is None:
        return {}
    if not isinstance(files, Mapping) or len(files) > MAX_FILES:
        raise ValidationError(f"files must map at most {MAX_FILES} relative paths to text")
    checked: dict[tuple[str, ...], bytes] = {}
    folded: set[str] = set()
    for path, content in files.items():
        parts = tuple(str(path).split("/"))
        if len(parts) > MAX_DEPTH or not all(_PART.fullmatch(p) for p in parts) \
                or parts[0].casefold() == SKILL_FILE.casefold():
            raise ValidationError(f"file path {str(path)[:100]!r}: use up to {MAX_DEPTH} "
                                  "plain names joined by '/' (no '..', no leading '.' or '/', "
                                  "not SKILL.md)")
        if str(path).casefold() in folded:  # one file on a case-insensitive filesystem
            raise ValidationError(f"file path {str(path)!r} differs from another only in "
                                  "case")
        folded.add(str(path).casefold())
        if not isinstance(content, str):
            raise ValidationError(f"file {path!r}: content must be text")
        checked[parts] = text(content, f"file {path!r}", MAX_FILE).encode()
    return checked


def render(name: str, description: str, body: str, meta: Mapping[str, Any]) -> bytes:
    """SKILL.md: front matter as YAML (so nothing in a value can end it early), then body."""
    import yaml

    head = yaml.safe_dump({"name": name, "description": description, **meta},
                          sort_keys=False, allow_unicode=True)
    return f"---\n{head}---\n{body.strip()}\n".encode()


def write_skill(home: Path, catalog: SkillCatalog, author: Author, *, name: Any,
                description: Any, body: Any, files: Any, now: datetime) -> Path:
    """A new agent-written skill; ValidationError says why not."""
    name = check_name(name)
    if not isinstance(description, str) or not isinstance(body, str):
        raise ValidationError("description and body must be text")
    description = " ".join(text(description, "description", MAX_DESCRIPTION,
                                required=True).split())
    body = text(body, "body", MAX_BODY, required=True)
    extra = check_files(files)
    existing = catalog.skills.get(name) or next(
        (s for s in catalog.skills.values() if s.name.casefold() == name.casefold()), None)
    if existing is not None:  # a look-alike in another case would pass for the person's
        raise ValidationError(f"a skill named {existing.name!r} exists ({existing.source}); "
                              + ("change it with skill_patch" if existing.source == AGENT
                                 else "it was written by hand and agents cannot change it"))
    meta = {"written_by": {"card": author.card_id, "profile": author.profile,
                           "model": author.model},
            "written_at": now.isoformat(timespec="seconds")}
    with fs.agent_root(home) as root:
        present = [e for e in fs.entries(root) if not e.startswith(".")]
        if any(e.casefold() == name.casefold() for e in present):
            raise ValidationError(f"{name!r} is taken in the agent-skill folder (in some "
                                  "case); choose another name")
        if len(present) >= MAX_AGENT_SKILLS:
            raise ValidationError(f"the board holds {len(present)} agent-written skills, the "
                                  "most it keeps; improve one with skill_patch instead")
        fs.make_dir(root, name)
        with fs.opened(root, [name]) as folder:
            for parts, data in extra.items():
                with fs.opened(folder, parts[:-1], create=True) as inner:
                    fs.write_file(inner, parts[-1], data)
            fs.write_file(folder, SKILL_FILE, render(name, description, body, meta))
    return home / fs.AGENT_SKILLS / name


def patch_skill(home: Path, author: Author, *, name: Any, old: Any, new: Any,
                now: datetime) -> int:
    """Replace `old` (found exactly once in the body) with `new`; the previous SKILL.md is
    kept as `.versions/SKILL.N.md`. Returns N."""
    name = check_name(name)
    if not isinstance(old, str) or not isinstance(new, str) or not old:
        raise ValidationError("old and new must be text, old not empty")
    text(new, "new", MAX_BODY)
    with fs.agent_root(home, create=False) as root, fs.opened(root, [name]) as folder:
        current = fs.read_file(folder, SKILL_FILE, MAX_BODY * 4).decode("utf-8", "replace")
        meta, body = _agent_skill(current, home / fs.AGENT_SKILLS / name)
        found = body.count(old)
        if found != 1:
            raise ValidationError(f"old text found {found} times in {name!r}; it must be "
                                  "found exactly once (add context around it)")
        patched = text(body.replace(old, new), "the patched body", MAX_BODY, required=True)
        meta["patched_by"] = {"card": author.card_id, "profile": author.profile,
                              "model": author.model}
        meta["patched_at"] = now.isoformat(timespec="seconds")
        with fs.opened(folder, [fs.VERSIONS], create=True) as versions:
            number = 1 + sum(1 for e in fs.entries(versions) if e.startswith("SKILL."))
            if number > MAX_VERSIONS:
                raise ValidationError(f"{name!r} keeps {MAX_VERSIONS} earlier versions, the "
                                      "most it may; write a new skill instead")
            fs.new_file(versions, f"SKILL.{number}.md", current.encode())
        fs.write_file(folder, SKILL_FILE, render(name, meta.pop("description"),
                                                 patched, {k: v for k, v in meta.items()
                                                           if k != "name"}))
    return number


def _agent_skill(current: str, where: Path) -> tuple[dict[str, Any], str]:
    """The front matter and body of a skill an agent wrote; a hand-placed one is refused."""
    try:
        meta = front_matter(current, where)
    except ConfigError as exc:
        raise ValidationError(exc.message) from None
    if not isinstance(meta.get("written_by"), dict) or not isinstance(
            meta.get("description"), str):
        raise ValidationError(f"{where.name!r} was put in place by hand; agents cannot "
                              "change it")
    return meta, split_front_matter(current)[1].strip()


@dataclass(frozen=True)
class SkillWriter:
    """What a card allowed to write skills writes with: the database folder and itself."""

    home: Path
    author: Author
