"""Fixtures of the reliability suite: boards on real files, a warm CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.service import Kanban
from state import DbLocation, open_database
from tests.acceptance.conftest import BoardFiles
from tests.support.hostile import WarmCli


@pytest.fixture
def board(tmp_path: Path) -> Iterator[BoardFiles]:
    """A kanban database file with the `default` board, and the board API over it."""
    db = open_database(DbLocation(str(tmp_path / "kanban.db"), "flag"), create=True)
    kb = Kanban(db)
    kb.ensure_board("default")
    try:
        yield BoardFiles(tmp_path / "kanban.db", kb)
    finally:
        db.dispose()


@pytest.fixture(scope="session")
def warm_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmCli]:
    """One pre-imported interpreter forking `kanban` commands, shared by the whole session."""
    cli = WarmCli(tmp_path_factory.mktemp("warm-cli"))
    try:
        yield cli
    finally:
        cli.close()
