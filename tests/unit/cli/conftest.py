"""CLI tests: each gets its own database and a home directory under tmp_path."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kanban.cli.app import app
from kanban.service import Kanban
from kanban.state.db import open_database
from kanban.state.paths import DbLocation

TABLES = ("board", "card", "dependency", "comment", "event", "setting", "run")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never touch the real home: HOME, XDG_DATA_HOME and the cwd point into tmp_path."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local/share"))
    for name in ("KANBAN_DB", "KANBAN_BOARD", "KANBAN_DEBUG", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return home


@dataclass
class Cli:
    """Runs `kanban ...` in-process against one database."""

    db_path: Path
    runner: CliRunner

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return self.runner.invoke(app, ["--db", str(self.db_path), *args], env=env)

    def ok(self, *args: str) -> Result:
        result = self(*args)
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json").stdout)

    def add(self, title: str, *args: str) -> int:
        return int(self.ok("add", title, *args).stdout.strip().removeprefix("#"))

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the board tables, to prove a failed command changed nothing."""
        with closing(sqlite3.connect(self.db_path)) as conn:
            return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
                    for t in TABLES}

    def fails(self, *args: str, code: int = 1, env: dict[str, str] | None = None) -> str:
        """Run a command that must fail cleanly; returns its one stderr line."""
        before = self.dump()
        result = self(*args, env=env)
        assert result.exit_code == code, (result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("kanban: error: ")
        assert "Traceback" not in result.output
        assert self.dump() == before
        return lines[0].removeprefix("kanban: error: ")


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated database with the default board, copied for each test (fast)."""
    path = tmp_path_factory.mktemp("template") / "kanban.db"
    db = open_database(DbLocation(str(path), "flag"), create=True)
    try:
        Kanban(db).ensure_board("default")
    finally:
        db.dispose()  # the last close checkpoints the WAL into the file
    return path


@pytest.fixture
def kanban(tmp_path: Path, template_db: Path) -> Iterator[Kanban]:
    """A fresh database, as `kanban init` makes it, and the library over it.

    Tests arrange states through it; its open connection also spares every CLI call
    the WAL checkpoint that closing the last connection costs.
    """
    path = tmp_path / "kanban.db"
    shutil.copyfile(template_db, path)
    path.chmod(0o600)
    db = open_database(DbLocation(str(path), "flag"))
    try:
        yield Kanban(db)
    finally:
        db.dispose()


@pytest.fixture
def cli(kanban: Kanban) -> Cli:
    assert kanban.db.path is not None
    return Cli(kanban.db.path, CliRunner())
