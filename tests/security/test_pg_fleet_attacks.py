"""Attacks on the PostgreSQL fleet's connection sharing: a command that takes its worker's
connection slots, and a LISTEN URL's password in an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanban.state.errors import DatabaseError
from kanban.state.pg_fleet import LISTEN_ENV, SLOTS_ENV, SlotGate
from kanban.tools.workbench import command_env


def test_commands_never_learn_where_the_connection_slots_are(tmp_path: Path) -> None:
    """Holding every slot's lock would starve the other cards' workers of the dispatcher."""
    gate = SlotGate.for_workers(tmp_path / "slots", 64)
    env = command_env({SLOTS_ENV: gate.env_value, "PATH": "/usr/bin"}, tmp_path)
    assert SLOTS_ENV not in env
    assert not any(str(tmp_path / "slots") in value for value in env.values())


def test_slot_files_are_private_to_the_dispatchers_user(tmp_path: Path) -> None:
    gate = SlotGate.for_workers(tmp_path / "slots", 8).create()
    assert (gate.folder.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o077) == 0 for p in gate.folder.iterdir())


@pytest.mark.postgres
def test_the_listen_urls_password_is_never_shown(pg_url: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from kanban.state.postgres import PostgresDatabase

    monkeypatch.setenv(LISTEN_ENV, "postgresql://kanban:hunter2-secret@127.0.0.1:1/nowhere")
    db = PostgresDatabase(pg_url)
    try:
        with pytest.raises(DatabaseError) as raised:
            db.listen()
        assert "hunter2" not in str(raised.value)
    finally:
        db.dispose()
