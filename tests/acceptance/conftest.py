"""Boards on real files for tests that drive the CLI, dispatchers and workers as processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state import DbLocation, open_database


@dataclass
class BoardFiles:
    """A kanban database with its config.toml, and the board API over it."""

    path: Path
    kb: Kanban

    @property
    def home(self) -> Path:
        return self.path.parent

    def configure(self, text: str) -> None:
        (self.home / "config.toml").write_text(text)

    def script(self, name: str, steps: list[dict]) -> str:
        """Write a scripted-model JSON file; returns its model spec."""
        path = self.home / f"{name}.json"
        path.write_text(json.dumps(steps))
        return f"scripted:{path}"

    def add(self, title: str, **fields: object) -> int:
        return self.kb.add_card(NewCard(title=title, **fields)).id  # type: ignore[arg-type]


@pytest.fixture
def board(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BoardFiles]:
    """A new board; `parametrize("board", ["rollback"], indirect=True)` makes it keep the
    rollback journal (as on a network filesystem), like `kanban init --journal rollback`."""
    journal = getattr(request, "param", "auto")
    db = open_database(DbLocation(str(tmp_path / "kanban.db"), "flag"), create=True,
                       journal=journal)
    kb = Kanban(db)
    kb.ensure_board("default")
    try:
        yield BoardFiles(tmp_path / "kanban.db", kb)
    finally:
        db.dispose()


def slow_steps(delay: float = 0.3, heartbeats: int = 2) -> list[dict]:
    """A worker that takes a while: show, heartbeat a few times, complete."""
    beat = {"tool_calls": [{"name": "kanban_heartbeat", "arguments": {"note": "working"}}],
            "delay_s": delay}
    return [
        {"tool_calls": [{"name": "kanban_show", "arguments": {}}], "delay_s": delay},
        *([beat] * heartbeats),
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "done slowly"}}],
         "delay_s": delay},
    ]
