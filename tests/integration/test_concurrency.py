"""Several OS processes on one SQLite file: BEGIN IMMEDIATE serialises read-then-write."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from tests.integration.proc_workers import (
    GATE_TIMEOUT_S,
    claim_until_empty,
    increment_counter,
    open_gate,
)
from tests.support.db import open_sqlite, runs_of

PROCESSES = 4
ROLLBACK_PROCESSES = 8  # issue 33: claims stay exact without WAL

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    """Spawned (not forked) workers, started once for the module."""
    with ProcessPoolExecutor(PROCESSES, mp_context=multiprocessing.get_context("spawn")) as ex:
        yield ex


def test_read_then_write_transactions_never_lose_an_update(
    pool: ProcessPoolExecutor, tmp_path: Path
) -> None:
    path, gate, times = tmp_path / "kanban.db", tmp_path / "gate", 50
    gate.mkdir()
    db = open_sqlite(path)
    with db.write() as conn:
        conn.execute("INSERT INTO setting (key, value) VALUES ('counter', '0')")
    futures = [pool.submit(increment_counter, str(path), str(gate), i, times)
               for i in range(PROCESSES)]
    open_gate(gate, PROCESSES)
    # Any "database is locked" in a child is re-raised here.
    assert sum(f.result(timeout=GATE_TIMEOUT_S) for f in futures) == PROCESSES * times
    with db.read() as conn:
        value = conn.scalar("SELECT value FROM setting WHERE key = 'counter'")
    db.dispose()
    assert int(value) == PROCESSES * times


def test_concurrent_claims_take_each_card_exactly_once(
    pool: ProcessPoolExecutor, tmp_path: Path
) -> None:
    path, gate, cards = tmp_path / "kanban.db", tmp_path / "gate", 60
    gate.mkdir()
    db = open_sqlite(path)
    kb = Kanban(db)
    ids = [kb.add_card(NewCard(f"card {i}", priority=i % 3)).id for i in range(cards)]
    futures = [pool.submit(claim_until_empty, str(path), str(gate), i) for i in range(PROCESSES)]
    open_gate(gate, PROCESSES)
    claimed = [card for f in futures for card in f.result(timeout=GATE_TIMEOUT_S)]
    assert Counter(claimed) == Counter(ids)
    assert {c.status for c in kb.list_cards()} == {"running"}
    assert all(len(runs_of(db, card_id)) == 1 for card_id in ids)
    db.dispose()


def test_eight_processes_claim_each_card_once_on_a_rollback_journal_board(
    tmp_path: Path,
) -> None:
    """A board in rollback-journal mode (as on a network filesystem): eight processes claim
    at once from one gate, and no card is claimed twice."""
    path, gate, cards = tmp_path / "kanban.db", tmp_path / "gate", 160
    gate.mkdir()
    db = open_database(DbLocation(str(path), "flag"), create=True, journal="rollback")
    kb = Kanban(db)
    kb.ensure_board("default")
    ids = [kb.add_card(NewCard(f"card {i}", priority=i % 3)).id for i in range(cards)]
    db.dispose()
    with ProcessPoolExecutor(ROLLBACK_PROCESSES,
                             mp_context=multiprocessing.get_context("spawn")) as eight:
        futures = [eight.submit(claim_until_empty, str(path), str(gate), i, 0.002)
                   for i in range(ROLLBACK_PROCESSES)]
        open_gate(gate, ROLLBACK_PROCESSES)
        per_process = [f.result(timeout=GATE_TIMEOUT_S) for f in futures]
    claimed = [card for cards_of_one in per_process for card in cards_of_one]
    assert Counter(claimed) == Counter(ids)  # every card once: 0 double claims
    assert sum(1 for taken in per_process if taken) >= 2, [len(t) for t in per_process]
    db = open_database(DbLocation(str(path), "flag"))
    try:
        assert db.journal_warning() is not None  # still the rollback journal
        assert {c.status for c in Kanban(db).list_cards()} == {"running"}
        assert all(len(runs_of(db, card_id)) == 1 for card_id in ids)
        with db.read() as conn:
            assert conn.scalar("PRAGMA journal_mode") == "delete"
    finally:
        db.dispose()
