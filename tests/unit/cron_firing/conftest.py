"""Cron job fixtures: the job API on the fake clock, and the `kanban cron` CLI over a test db."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from kanban.cli.app import app as kanban_app
from kanban.cron.service import CronJobs
from kanban.state.store import Database
from tests.support.db import FakeClock

TABLES = ("board", "card", "cron_job", "event")


@pytest.fixture
def jobs(db: Database, clock: FakeClock) -> CronJobs:
    return CronJobs(db, clock=clock)


def cli_app() -> click.Group:
    """The real `kanban` command (its `cron` group loads on first use)."""
    return kanban_app


@dataclass
class CronCli:
    """Runs `kanban --db PATH cron ...` in-process."""

    db_path: Path
    app: click.Group
    runner: CliRunner

    def __call__(self, *args: str) -> Result:
        return self.runner.invoke(self.app, ["--db", str(self.db_path), "cron", *args])

    def ok(self, *args: str) -> Result:
        result = self(*args)
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json").stdout)

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        with closing(sqlite3.connect(self.db_path)) as conn:
            return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
                    for t in TABLES}

    def fails(self, *args: str, code: int = 1) -> str:
        """A command that must fail with one clean stderr line and change nothing."""
        before = self.dump()
        result = self(*args)
        assert result.exit_code == code, (result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("kanban: error: ")
        assert "Traceback" not in result.output
        assert self.dump() == before
        return lines[0].removeprefix("kanban: error: ")


@pytest.fixture
def cli(db: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[CronCli]:
    assert db.path is not None
    for name in ("KANBAN_DB", "KANBAN_BOARD", "KANBAN_DEBUG", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    yield CronCli(db.path, cli_app(), CliRunner())
