"""Eight `kanban init` at once on a fresh database: every one succeeds, one schema results."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kanban.state.migrations import LATEST
from tests.support.db import STORES
from tests.support.procs import KANBAN

INITS = 8


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url")
    return str(tmp_path / "fresh" / "kanban.db")


@pytest.mark.parametrize("target", STORES, indirect=True)
def test_eight_concurrent_inits_all_succeed(target: str) -> None:
    procs = [subprocess.Popen([*KANBAN, "--db", target, "init"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for _ in range(INITS)]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    for proc in procs:
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert [code for code, _ in results] == [0] * INITS, results

    from kanban.state import DbLocation, open_database

    db = open_database(DbLocation(target, "flag"))
    try:
        with db.read() as conn:
            assert conn.column("SELECT id FROM schema_migration ORDER BY id") == list(
                range(1, LATEST + 1))
            assert conn.column("SELECT name FROM board") == ["default"]
    finally:
        db.dispose()
