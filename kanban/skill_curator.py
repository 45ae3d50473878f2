"""The skill curator: agent-written skills nobody used for a while go stale, then to the
archive (issue 33).

It acts only on skills an agent wrote (a `written_by` in the front matter, in the
agent-skill folder), never on pinned ones or those a person put in place; before it moves
anything it saves the whole agent-skill folder as a tar.gz in `.kanban/skill-backups/`.
It never deletes: its most destructive act is moving a folder into `.archive/`.
"""

from __future__ import annotations

import os
import re
import secrets
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kanban import skill_files as fs
from kanban import skill_usage
from kanban.agent_skills import check_name
from kanban.errors import KanbanError, ValidationError
from kanban.skills import Skill, agent_skills
from kanban.state.config import Config, SkillSettings
from kanban.state.store import Database

BACKUPS = "skill-backups"  # beside the database
MAX_RESTORED = 16 * 2**20  # one file brought back from a backup
_PART = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]{1,64}")  # a plain name, not . or ..


@dataclass(frozen=True)
class Move:
    """One change the curator makes: a skill to `state` after `idle_days` without use."""

    name: str
    state: str  # stale | archived | active (used again since it went stale)
    idle_days: float

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "state": self.state, "idle_days": round(self.idle_days, 1)}


@dataclass(frozen=True)
class Curation:
    moves: tuple[Move, ...]
    backup: Path | None  # None: a dry run, or nothing to change
    dry_run: bool


def plan(db: Database, home: Path, settings: SkillSettings, now: datetime, *,
         named: Iterable[str] = ()) -> list[Move]:
    """What the curator would change now (reads only). A skill `named` (by a profile of
    the config), or named by an unfinished card or an enabled cron job, counts as used
    now: archived, it would fail the card that is given it next."""
    skills = [s for s in agent_skills(home) if s.written_by is not None]
    if not skills:
        return []  # most boards: no agent-written skills, no database read
    with db.read() as conn:
        used = {s.name: skill_usage.of(conn, s.name) for s in skills}
        wanted = skill_usage.named_by_board(conn) | set(named)
    moves = []
    for skill in skills:
        record = used[skill.name]
        if record.pinned or record.state == "archived":
            continue
        last = now if skill.name in wanted else _last_activity(skill, record.last_used)
        idle = (now - last) / timedelta(days=1)
        state = ("archived" if idle >= settings.archive_after_days
                 else "stale" if idle >= settings.stale_after_days else "active")
        if state != record.state:
            moves.append(Move(skill.name, state, idle))
    return moves


def curate(db: Database, home: Path, settings: SkillSettings, now: datetime, *,
           dry_run: bool = False, named: Iterable[str] = ()) -> Curation:
    """Mark and archive as `plan` says, after a backup of the agent-skill folder."""
    moves = plan(db, home, settings, now, named=named)
    if dry_run or not moves:
        return Curation(tuple(moves), None, dry_run)
    backup = back_up(home, now)
    for move in moves:
        if move.state == "archived":
            archive(home, move.name)
        with db.write() as conn:
            skill_usage.set_state(conn, move.name, state=move.state, now=now)
    return Curation(tuple(moves), backup, dry_run)


def curate_or_say(db: Database, home: Path, settings: SkillSettings,
                  now: datetime, *, named: Iterable[str] = ()) -> Curation | str:
    """`curate`, or what stopped it (the dispatcher logs that and tries again later)."""
    try:
        return curate(db, home, settings, now, named=named)
    except KanbanError as exc:
        return exc.message
    except OSError as exc:
        return f"{exc.filename or 'the skill folder'}: {exc.strerror}"


def named_by_profiles(config: Config) -> set[str]:
    """The skills every card of some profile gets."""
    return {name for profile in config.profiles.values() for name in profile.skills}


def _last_activity(skill: Skill, last_used: datetime | None) -> datetime:
    """The newest use; a skill never used since it was written counts from its file."""
    if last_used is not None:
        return last_used
    stamp = (skill.folder / "SKILL.md").stat(follow_symlinks=False).st_mtime
    return datetime.fromtimestamp(stamp, tz=UTC)


def back_up(home: Path, now: datetime) -> Path:
    """The agent-skill folder as `skill-backups/agent-skills-STAMP.tar.gz` (symlinks kept as
    symlinks, never followed)."""
    folder = home / BACKUPS
    folder.mkdir(mode=0o700, exist_ok=True)
    target = folder / f"agent-skills-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}.tar.gz"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        tar.add(home / fs.AGENT_SKILLS, arcname=fs.AGENT_SKILLS, recursive=True)
    return target


def archive(home: Path, name: str) -> None:
    """agent-skills/NAME into agent-skills/.archive/NAME (an older archived copy of the same
    name is kept under a longer name)."""
    with fs.agent_root(home, create=False) as root, \
            fs.opened(root, [fs.ARCHIVE], create=True) as shelf:
        taken = set(fs.entries(shelf))
        kept = name
        while kept in taken:
            kept = f"{name}.{secrets.token_hex(3)}"
        if kept != name:
            fs.move(shelf, name, shelf, kept)
        fs.move(root, name, shelf, name)


def restore(db: Database, home: Path, name: str, now: datetime) -> str:
    """An archived skill back in use (from the archive, else from the newest backup that
    holds it); says where it came from."""
    check_name(name)
    with fs.agent_root(home) as root:
        if name in fs.entries(root):
            raise ValidationError(f"skill {name!r} is not archived")
        with fs.opened(root, [fs.ARCHIVE], create=True) as shelf:
            if name in fs.entries(shelf):
                fs.move(shelf, name, root, name)
                source = "the archive"
            else:
                source = _from_backup(home, root, name)
    with db.write() as conn:
        skill_usage.set_state(conn, name, state="active", now=now)
        skill_usage.record(conn, [name], "restore", now=now)
    return source


def _from_backup(home: Path, root: int, name: str) -> str:
    prefix = f"{fs.AGENT_SKILLS}/{name}/"
    for backup in sorted((home / BACKUPS).glob("agent-skills-*.tar.gz"), reverse=True):
        with tarfile.open(backup, "r:gz") as tar:
            members = [m for m in tar.getmembers()
                       if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
            if not any(m.name == f"{prefix}SKILL.md" for m in members):
                continue
            fs.make_dir(root, name)
            with fs.opened(root, [name]) as folder:
                for member in members:
                    parts = member.name[len(prefix):].split("/")
                    data = tar.extractfile(member) if member.isfile() else None
                    if data is None or not all(_PART.fullmatch(p) for p in parts):
                        continue  # folders come with their files; odd names stay behind
                    with fs.opened(folder, parts[:-1], create=True) as inner:
                        fs.write_file(inner, parts[-1], data.read(MAX_RESTORED))
            return backup.name
    raise ValidationError(f"no archived skill or backup holds {name!r}")
