"""Fixtures shared by every layer: an isolated home, fresh stores, a board with a fake clock."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import (
    FakeClock,
    copy_sqlite,
    fresh_postgres_database,
    open_postgres,
    open_sqlite,
    reset_postgres,
)

# A suite started as a background job (`make test &`, a CI step's `cmd &`) inherits Ctrl-C
# ignored, and so would every command a test starts: kanban then rightly ignores it, and
# the tests of what Ctrl-C does see nothing. Each test process takes it back, as a
# terminal's foreground job has it; the processes it starts get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_SCRUBBED = ("KANBAN_DB", "KANBAN_BOARD", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture(autouse=True)
def isolated_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                  ) -> Path:
    """No test touches the real home directory or sees real credentials."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    for name in _SCRUBBED:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(autouse=True)
def leaves_the_checkout_alone() -> Iterator[None]:
    """No test writes a database into the directory pytest runs in (the checkout)."""
    stray = Path.cwd() / "kanban.db"
    existed = stray.exists()
    yield
    if not existed and stray.exists():
        stray.unlink()
        pytest.fail(f"this test created {stray}")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database URL (dropped afterwards); skips when no server answers."""
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str:
    """Which store backs `db`: "sqlite" unless a test parametrizes it (indirect=True)."""
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated file with the `default` board; tests get copies (migrating costs more)."""
    path = tmp_path_factory.mktemp("template") / "kanban.db"
    open_sqlite(path).dispose()  # closing the last connection folds the WAL into the file
    return path


@pytest.fixture(scope="session")
def pg_store() -> Iterator[Database]:
    """One migrated PostgreSQL database for the session; `db` empties it for each test."""
    with fresh_postgres_database() as url:
        database = open_postgres(url)
        try:
            yield database
        finally:
            database.dispose()


@pytest.fixture
def db(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Database]:
    """A fresh, migrated database with the `default` board."""
    if store == "postgres":
        database = request.getfixturevalue("pg_store")
        reset_postgres(database)  # emptier than CREATE DATABASE, and ten times faster
        yield database
        database.dispose()  # no connection outlives the test that opened it
    elif store == "sqlite":
        database = copy_sqlite(request.getfixturevalue("sqlite_template"), tmp_path / "kanban.db")
        try:
            yield database
        finally:
            database.dispose()
    else:  # pragma: no cover - a typo in a parametrize list
        raise ValueError(f"unknown store {store!r}")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def kb(db: Database, clock: FakeClock) -> Kanban:
    """The board API over `db`, on a clock that moves only with `clock.advance(seconds)`."""
    return Kanban(db, clock=clock)
