"""Skills: folders holding a SKILL.md that tells a worker how to do one kind of work.

SKILL.md starts with YAML front matter (`name`, `description`, optional `tags`) between
`---` lines; the rest is the body a worker reads with `skill_view`. Skills are found, in
order of precedence, in the database's folder (`.kanban/skills/`), the user's config
directory (`~/.config/kanban/skills/`), the skills agents wrote (`.kanban/agent-skills/`,
see kanban.agent_skills), and packages that register a folder of skills under
the `kanban.skills` entry-point group (the entry point names a path, or a callable that
returns one or several).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kanban.errors import ConfigError, ValidationError
from kanban.skill_files import AGENT_SKILLS, read_skill_file
from kanban.validation import SKILL_NAME

SKILL_FILE = "SKILL.md"
ENTRY_POINT_GROUP = "kanban.skills"
AGENT = "agent"  # the source of skills in the agent-skill folder
MAX_SKILL_FILE = 256 * 1024
MAX_DESCRIPTION = 1024
MAX_FILES = 200  # other files of one skill that a worker may see
MAX_SKILL_BYTES = 20 * 2**20  # all files of one skill copied into a workspace


class UnknownSkill(ValidationError):
    def __init__(self, names: Sequence[str], known: Iterable[str]) -> None:
        listed = ", ".join(sorted(known)) or "none; see `kanban skills`"
        super().__init__(f"unknown skill{'s' if len(names) > 1 else ''} "
                         f"{', '.join(map(repr, names))} (known: {listed})")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    tags: tuple[str, ...]
    folder: Path
    source: str  # project | user | agent | package:<entry point>
    written_by: str | None = None  # an agent-written skill: "card #N, profile P, model M"

    @property
    def body(self) -> str:
        """SKILL.md without its front matter."""
        if self.source == AGENT:  # a folder a card's commands may reach: no symlinks
            data = read_skill_file(self.folder, SKILL_FILE, MAX_SKILL_FILE)
            return _split(data.decode("utf-8", "replace"))[1].strip()
        return _split(_read_skill_file(self.folder / SKILL_FILE))[1].strip()

    def files(self) -> list[str]:
        """The skill's other files, relative to its folder (bounded, no symlinks followed)."""
        found: list[str] = []
        for path in sorted(_walk(self.folder)):
            rel = path.relative_to(self.folder).as_posix()
            if rel != SKILL_FILE:
                found.append(rel)
            if len(found) >= MAX_FILES:
                break
        return found

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "tags": list(self.tags),
                "source": self.source, "folder": str(self.folder),
                "written_by": self.written_by}


@dataclass(frozen=True)
class SkillCatalog:
    """Every skill found, by name; `problems` says which folders could not be read."""

    skills: Mapping[str, Skill] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def get(self, name: str) -> Skill:
        try:
            return self.skills[name]
        except KeyError:
            raise UnknownSkill([name], self.skills) from None

    def require(self, names: Iterable[str]) -> list[Skill]:
        """The named skills, or UnknownSkill naming every missing one."""
        names = list(dict.fromkeys(names))
        missing = [n for n in names if n not in self.skills]
        if missing:
            raise UnknownSkill(missing, self.skills)
        return [self.skills[n] for n in names]

    def __iter__(self) -> Iterator[Skill]:
        return iter(sorted(self.skills.values(), key=lambda s: s.name))


def user_skills_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "kanban" / "skills"


def skill_roots(home: Path, env: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """Folders of skill folders, highest precedence first (packages come between the
    person's and the agents')."""
    env = os.environ if env is None else env
    return [("project", home / "skills"), ("user", user_skills_dir(env)),
            (AGENT, home / AGENT_SKILLS)]


def load_catalog(home: Path, env: Mapping[str, str] | None = None, *,
                 packages: bool = True) -> SkillCatalog:
    """Every skill visible from the database folder `home`; the first of a name wins:
    a person's (project, user), then installed packages', then agents' (an agent's skill
    never passes for one a person put in place or installed, even one installed later)."""
    roots = skill_roots(home, env)
    problems: list[str] = []
    if packages:
        found, problems = package_roots()
        roots = [r for r in roots if r[0] != AGENT] + found + [r for r in roots if r[0] == AGENT]
    skills: dict[str, Skill] = {}
    for source, root in roots:
        for skill_or_problem in _skills_in(root, source):
            if isinstance(skill_or_problem, str):
                problems.append(skill_or_problem)
            elif skill_or_problem.name not in skills:
                skills[skill_or_problem.name] = skill_or_problem
    return SkillCatalog(skills, tuple(problems))


def agent_skills(home: Path) -> list[Skill]:
    """The skills in the agent-skill folder (written by agents, or put there by hand)."""
    return [s for s in _skills_in(home / AGENT_SKILLS, AGENT) if isinstance(s, Skill)]


def package_roots() -> tuple[list[tuple[str, Path]], list[str]]:
    """Folders registered by installed packages under the `kanban.skills` entry points,
    and what went wrong loading the others."""
    from importlib.metadata import entry_points

    roots: list[tuple[str, Path]] = []
    problems: list[str] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            target = ep.load()
            found = target() if callable(target) else target
            items = found if isinstance(found, list | tuple) else [found]
            roots.extend((f"package:{ep.name}", Path(os.fspath(item))) for item in items)
        except Exception as exc:  # a broken plugin must not stop the board
            problems.append(f"package:{ep.name}: cannot load {ep.value}: "
                            f"{type(exc).__name__}: {exc}")
    return roots, problems


def _skills_in(root: Path, source: str) -> Iterator[Skill | str]:
    if source == AGENT and root.is_symlink():
        return  # kanban made this folder; a symlink in its place was planted
    if not root.is_dir():
        if source.startswith("package:"):
            yield f"{source}: {root} is not a folder"
        return
    for folder in sorted(root.iterdir()):
        if source == AGENT and (folder.is_symlink() or (folder / SKILL_FILE).is_symlink()):
            continue  # an agent's folder holds only what kanban wrote there
        if folder.is_dir() and (folder / SKILL_FILE).is_file():
            try:
                yield parse_skill(folder, source)
            except ConfigError as exc:
                yield exc.message


def parse_skill(folder: Path, source: str) -> Skill:
    """A skill from `folder/SKILL.md`; ConfigError says what is wrong with it."""
    where = folder / SKILL_FILE
    meta = _front_matter(_read_skill_file(where), where)
    name = meta.get("name", folder.name)
    description = meta.get("description")
    tags = meta.get("tags", [])
    if not isinstance(name, str) or not SKILL_NAME.match(name):
        raise ConfigError(f"{where}: name must be 1-64 letters, digits, '.', '_' or '-'")
    if not isinstance(description, str) or not description.strip():
        raise ConfigError(f"{where}: the front matter needs a description")
    if isinstance(tags, str):
        tags = [t.strip() for t in tags.split(",") if t.strip()]
    if not isinstance(tags, list) or not all(isinstance(t, str | int) for t in tags):
        raise ConfigError(f"{where}: tags must be a list of words")
    description = " ".join(description.split())[:MAX_DESCRIPTION]
    return Skill(name, description, tuple(str(t) for t in tags), folder, source,
                 _author(meta) if source == AGENT else None)


def _author(meta: Mapping[str, Any]) -> str | None:
    """Who wrote an agent's skill, from its front matter; None: put there by hand."""
    by = meta.get("written_by")
    if not isinstance(by, dict):
        return None
    return f"card #{by.get('card')}, profile {by.get('profile')}, model {by.get('model')}"


def _read_skill_file(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SKILL_FILE + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_SKILL_FILE:
        raise ConfigError(f"{path}: larger than {MAX_SKILL_FILE // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(front matter, body) of a SKILL.md's text; None when it has no front matter."""
    return _split(text)


def front_matter(text: str, where: Path) -> dict[str, Any]:
    """The front matter as a mapping; ConfigError says what is wrong with it."""
    return _front_matter(text, where)


def _split(text: str) -> tuple[str | None, str]:
    """(front matter, body); None when the file has no front matter."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() in ("---", "..."):
            return "".join(lines[1:index]), "".join(lines[index + 1:])
    return None, text


def _front_matter(text: str, where: Path) -> dict[str, Any]:
    import yaml  # here: only skill users pay for it

    head, _ = _split(text)
    if head is None:
        raise ConfigError(f"{where}: no front matter (start the file with a '---' line, "
                          "then name: and description:, then '---')")
    try:
        meta = yaml.safe_load(head) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: bad front matter: {' '.join(str(exc).split())}") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: the front matter must be a mapping")
    return meta


def _walk(folder: Path) -> Iterator[Path]:
    """Regular files under `folder`, not following symlinks; hidden entries skipped."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if not name.startswith(".") and path.is_file() and not path.is_symlink():
                yield path


def shipped_files(skill: Skill) -> list[str]:
    """The skill's other files a worker gets, within MAX_SKILL_BYTES in all."""
    total, shipped = 0, []
    for rel in skill.files():
        total += (skill.folder / rel).stat().st_size
        if total > MAX_SKILL_BYTES:
            break
        shipped.append(rel)
    return shipped
