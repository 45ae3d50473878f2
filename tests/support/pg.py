"""PostgreSQL helpers for tests that drive dispatchers and workers as processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


def _migration_5_card_index() -> str:
    """Migration 5's GIN index over a card's text, as that frozen migration writes it."""
    from importlib import resources

    from kanban.state.migrations import statements

    text = resources.files("kanban.state.migrations").joinpath(
        "0005_daily.postgresql.sql").read_text()
    (found,) = [s for s in statements(text) if s.startswith("CREATE INDEX ix_card_search ")]
    return found


# Migration 23 undone (PostgreSQL): the card documents back in migration 5's GIN index on
# `card`, the cards kept, so that tests can run 23 again on a board that has some.
UNDO_CARD_SEARCH = (
    "DROP TRIGGER card_search_insert ON card",
    "DROP TRIGGER card_search_update ON card",
    "DROP FUNCTION card_search_write()",
    "DROP TABLE card_search",
    "DROP FUNCTION card_search_fields(TEXT, TEXT, TEXT)",
    "DROP FUNCTION card_search_result(TEXT)",
    _migration_5_card_index(),
)


def skip_or_fail(reason: str) -> None:
    """Skip where a real part is missing; under CI=true that is a failure, not a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required when CI=true)")
    pytest.skip(reason)


def pg_query(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """One statement on a connection of its own (autocommit); rows if it returns any."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=30) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def terminate_backends(url: str) -> int:
    """pg_terminate_backend on every other backend of this test's own database (only it)."""
    rows = pg_query(url, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                         "FROM pg_stat_activity WHERE datname = current_database() "
                         "AND pid <> pg_backend_pid()")
    return int(rows[0][0])


def pg_counts(url: str) -> dict[str, int]:
    return dict(pg_query(url, "SELECT status, count(*) FROM card GROUP BY status"))


def ensure_faketime() -> str:
    """The faketime command (Debian package faketime), installed when missing and root."""
    found = shutil.which("faketime")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-q", "faketime"], env=env,
                       capture_output=True, timeout=600, check=False)
        found = shutil.which("faketime")
        if found is None:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True,
                           timeout=600, check=False)
            subprocess.run(["apt-get", "install", "-y", "-q", "faketime"], env=env,
                           capture_output=True, timeout=600, check=False)
            found = shutil.which("faketime")
    if found is None:
        skip_or_fail("faketime is not installed (Debian package faketime)")
    assert found is not None
    return found


@contextmanager
def database_outage(url: str) -> Iterator[None]:
    """This test's database (only it) refuses connections and loses every backend, as in a
    server restart, until the block ends."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(url)["dbname"]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=30) as admin:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        try:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
            deadline = time.monotonic() + 10
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                (name,)).fetchone()[0] and time.monotonic() < deadline:
                time.sleep(0.01)  # terminating is asynchronous: wait until they are gone
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
