"""Fixtures of the reliability suite: boards on real files, a warm CLI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.acceptance.conftest import BoardFiles, board  # noqa: F401 - shared fixture
from tests.support.hostile import WarmCli


@pytest.fixture(scope="session")
def warm_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmCli]:
    """One pre-imported interpreter forking `kanban` commands, shared by the whole session."""
    cli = WarmCli(tmp_path_factory.mktemp("warm-cli"))
    try:
        yield cli
    finally:
        cli.close()
