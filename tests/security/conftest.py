"""The adversarial harness: a real dispatcher holding canary credentials, a canary file in
its HOME, and a model (the local wire-format server) that replays the attacker's tool calls.

Every test here is an attack written as the attacker would write it. After the card ends,
`Attack.assert_contained()` checks that no canary reached anything a model or a later
command can read: the board's database (transcripts, events, results), the worker logs, the
card's workspace and any path the test names.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from tests.acceptance.conftest import BoardFiles
from tests.acceptance.conftest import board as board  # noqa: F401 (re-exported fixture)
from tests.support.llm_bodies import tool_results
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply
from tests.support.procs import kanban, query
from tests.support.sandbox import require_bwrap

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Canaries:
    """Secrets the attacker wants: credentials in the dispatcher's environment and a file
    in its HOME. None of their values may appear anywhere the model can read."""

    home: Path
    openai_key: str = field(default_factory=lambda: "sk-canary-" + uuid.uuid4().hex)
    cloud_key: str = field(default_factory=lambda: "aws-canary-" + uuid.uuid4().hex)
    file_secret: str = field(default_factory=lambda: "file-canary-" + uuid.uuid4().hex)

    @property
    def values(self) -> tuple[str, ...]:
        return (self.openai_key, self.cloud_key, self.file_secret)

    @property
    def secret_file(self) -> Path:
        return self.home / ".ssh" / "id_canary"

    def plant(self) -> None:
        self.secret_file.parent.mkdir(parents=True, exist_ok=True)
        self.secret_file.write_text(self.file_secret + "\n")
        (self.home / ".netrc").write_text(f"machine example.test password {self.file_secret}\n")

    def env(self, server: LLMServer, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, **server.env(), "HOME": str(self.home),
                "OPENAI_API_KEY": self.openai_key, "AWS_SECRET_ACCESS_KEY": self.cloud_key,
                **(extra or {})}


@dataclass
class Attack:
    """One board under attack: `run(calls)` adds a card whose model makes exactly `calls`
    (one per turn), then completes; returns the tool results the model was shown."""

    board: BoardFiles
    canaries: Canaries
    profile: str = "attacker"

    def configure(self, profile_body: str, extra: str = "") -> None:
        self.board.configure(f"[profiles.{self.profile}]\nmodel = \"openai:test-model\"\n"
                             f"{profile_body.strip()}\n{extra}")

    def run(self, calls: Sequence[Call], *, title: str = "attack", env: dict[str, str] | None
            = None, **fields: object) -> tuple[int, list[str]]:
        card = self.board.add(title, profile=self.profile, **fields)
        return card, self.replay(card, calls, env=env)

    def replay(self, card: int, calls: Sequence[Call], *, env: dict[str, str] | None = None
               ) -> list[str]:
        """Dispatch once with the model replaying `calls` on `card` (already on the board)."""
        seen: list[str] = []
        with LLMServer(responder=replayer(calls, seen)) as server:
            dispatched = kanban(self.board.path, "dispatch", "--once",
                                env=self.canaries.env(server, env), check=False)
        if len(seen) < len(calls):  # shown with the test's failure, if it is one
            logs = sorted((self.board.home / "logs").glob(f"{card}-*.log"))
            print(f"card #{card}: {len(seen)} of {len(calls)} calls answered; {self.card(card)}"
                  f"\ndispatch exit {dispatched.returncode}:\n{dispatched.stdout[-3000:]}"
                  f"{dispatched.stderr[-3000:]}", *(f"{log}:\n{log.read_text()[-3000:]}"
                                                  for log in logs), sep="\n")
        return seen

    def card(self, card: int) -> tuple[str, str | None]:
        return query(self.board.path, "SELECT status, error FROM card WHERE id = ?", card)[0]

    def workspace(self, card: int) -> Path:
        return self.board.home / "workspaces" / "default" / str(card)

    def assert_contained(self, *extra: Path) -> None:
        """No canary value in the database, the logs, the workspaces or `extra` paths."""
        leaks = canary_leaks(self.canaries.values, [self.board.home, *extra])
        assert not leaks, f"canaries leaked into: {leaks}"


def replayer(calls: Sequence[Call], seen: list[str]) -> Callable[[dict[str, Any]], Reply]:
    """A model that makes `calls` one per turn, then completes the card."""

    def respond(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        seen[:] = results
        if len(results) < len(calls):
            return tool_reply(calls[len(results)])
        if len(results) == len(calls):
            return tool_reply(("kanban_complete", {"summary": "attack over"}))
        return text_reply("done")

    return respond


def canary_leaks(values: Sequence[str], roots: Sequence[Path]) -> list[str]:
    """Every file under `roots` (SQLite databases read as rows) holding one of `values`."""
    found: list[str] = []
    needles = [v.encode() for v in values]
    for root in roots:
        for path in _files(root):
            if path.name == "id_canary" or path.name == ".netrc":
                continue  # the planted originals themselves
            if path.suffix == ".db":
                found += [f"{path}:{row}" for row in _db_rows(path, values)]
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            found += [str(path) for n in needles if n in data]
    return found


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                yield path


def _db_rows(path: Path, values: Sequence[str]) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        tables = [t for (t,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        hits = []
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):  # noqa: S608 (own schema)
                text = " ".join(str(c) for c in row)
                hits += [f"{table}" for v in values if v in text]
        return hits
    except sqlite3.DatabaseError:
        return []
    finally:
        conn.close()


@pytest.fixture
def canaries(tmp_path: Path) -> Canaries:
    planted = Canaries(home=tmp_path / "dispatcher-home")
    planted.plant()
    return planted


@pytest.fixture
def attack(board: BoardFiles, canaries: Canaries) -> Attack:  # noqa: F811
    return Attack(board, canaries)


@pytest.fixture
def project_attack(project: Path, canaries: Canaries) -> Iterator[Attack]:
    """An attack on a board kept inside the test module's own `project` folder (its
    `.kanban`), as `kanban init` makes one in a checkout."""
    home = project / ".kanban"
    home.mkdir()
    db = open_database(DbLocation(str(home / "kanban.db"), "flag"), create=True)
    kb = Kanban(db)
    kb.ensure_board("default")
    try:
        yield Attack(BoardFiles(home / "kanban.db", kb), canaries)
    finally:
        db.dispose()


@pytest.fixture
def sandboxed() -> None:
    """Attacks on the bubblewrap wall need it (CI=true turns a missing bwrap into a failure)."""
    require_bwrap()
