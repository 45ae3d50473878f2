"""A stopped dispatcher hands its running cards back without spending an attempt (SQLite;
the PostgreSQL rolling restart is in test_postgres_cluster.py)."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.procs import query, start_dispatcher, stop, wait_until


def test_sigterm_hands_running_cards_back_with_no_attempt_spent(board: BoardFiles,
                                                                tmp_path: Path) -> None:
    spec = board.script("slow", slow_steps(1.0, heartbeats=30))
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')
    card = board.add("interrupted", max_attempts=1)
    d = start_dispatcher(board.path, "--max-workers", "1", log=tmp_path / "d.log")
    wait_until(lambda: query(board.path, "SELECT count(*) FROM run WHERE pid IS NOT NULL")
               == [(1,)], timeout=60, what="a running worker")
    assert stop(d) == 0  # no --drain-timeout: hand back at once
    status, attempt, base = query(board.path, "SELECT status, attempt, retry_base FROM card "
                                              "WHERE id = ?", card)[0]
    assert (status, attempt - base) == ("ready", 0)
    assert query(board.path, "SELECT outcome FROM run WHERE card_id = ?", card) == [
        ("handed_back",)]
    assert "handed back" in (tmp_path / "d.log").read_text()
