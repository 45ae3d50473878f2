"""Where the database lives: --db > KANBAN_DB > nearest .kanban/ walking up > user data dir."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = ".kanban"
DB_NAME = "kanban.db"


@dataclass(frozen=True)
class DbLocation:
    """A resolved database: a SQLite file path or a PostgreSQL URL."""

    target: str
    source: str  # flag | env | project | user

    @property
    def is_postgres(self) -> bool:
        return self.target.startswith(("postgresql:", "postgresql+", "postgres:"))

    @property
    def path(self) -> Path:
        return Path(self.target)

    @property
    def home(self) -> Path:
        """The folder holding config.toml, workspaces/ and logs/."""
        if self.is_postgres:
            return user_data_dir(os.environ)
        return self.path.parent

    @property
    def implicit(self) -> bool:
        """True for the user-wide default, used when nothing else names a database."""
        return self.source == "user"


def user_data_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".local/share")
    return Path(base) / "kanban"


def find_project_db(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / PROJECT_DIR / DB_NAME
        if candidate.exists():
            return candidate
    return None


def resolve_db(
    explicit: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> DbLocation:
    env = os.environ if env is None else env
    if explicit:
        return DbLocation(_normalise(explicit), "flag")
    if env.get("KANBAN_DB"):
        return DbLocation(_normalise(env["KANBAN_DB"]), "env")
    found = find_project_db((cwd or Path.cwd()).resolve())
    if found is not None:
        return DbLocation(str(found), "project")
    return DbLocation(str(user_data_dir(env) / DB_NAME), "user")


def _normalise(target: str) -> str:
    if target.startswith(("postgresql:", "postgresql+", "postgres:")):
        return target
    return str(Path(target).expanduser().absolute())
