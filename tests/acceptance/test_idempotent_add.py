"""Sixteen `kanban add --key` processes at once create exactly one card."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from tests.support.procs import KANBAN

RACERS = 16


def race(target: str) -> list[str]:
    """Start every process before any can finish, then collect what each printed."""
    env = {**os.environ, "KANBAN_DB": target}  # --db takes a path; a URL goes by variable
    procs = [subprocess.Popen([*KANBAN, "add", f"racer {n}", "--key", "same"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(RACERS)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(out.strip())
    return outputs


def titles(target: str) -> list[str]:
    db = open_database(DbLocation(target, "flag"))
    try:
        return [c.title for c in Kanban(db).list_cards()]
    finally:
        db.dispose()


def test_sqlite(tmp_path: Path) -> None:
    target = str(tmp_path / "kanban.db")
    subprocess.run([*KANBAN, "init"], env={**os.environ, "KANBAN_DB": target}, check=True,
                   capture_output=True)
    outputs = race(target)
    assert set(outputs) == {"#1"}
    assert len(titles(target)) == 1


@pytest.mark.postgres
def test_postgres(pg_url: str) -> None:
    subprocess.run([*KANBAN, "init"], env={**os.environ, "KANBAN_DB": pg_url}, check=True,
                   capture_output=True)
    outputs = race(pg_url)
    assert len(set(outputs)) == 1
    assert len(titles(pg_url)) == 1
