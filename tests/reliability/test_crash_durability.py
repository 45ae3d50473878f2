"""Writers SIGKILLed mid-transaction, round after round: nothing committed is ever lost.

The database runs with the default `synchronous=NORMAL`. In WAL mode that is durable
across *process* crashes (a committed transaction is in the WAL file, i.e. in the OS page
cache, before COMMIT returns; the kernel writes it out even if the process dies). It is not
durable across power loss or an OS crash, where the last transactions may roll back; that
needs `synchronous=FULL` and cannot be tested by killing processes. The same holds with the
rollback journal (a board on a network filesystem): a transaction is committed once its
journal is deleted.
"""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from tests.support.hostile import FORK, committed_ids, crash_writer, integrity, rows
from tests.support.procs import wait_until

ROUNDS = 20
WRITERS = 2  # two at once: one is often waiting for the lock when it dies
GOAL_SIZE = 8_000


@pytest.mark.parametrize("journal", ["auto", "rollback"])
def test_sigkilled_writers_never_lose_a_committed_card(tmp_path: Path, journal: str) -> None:
    db = tmp_path / "kanban.db"
    setup = open_database(DbLocation(str(db), "flag"), create=True, journal=journal)
    Kanban(setup).ensure_board("default")
    setup.dispose()  # no connection of this process may cross the forks below
    # An idle connection held open all along: no "last close" ever checkpoints and deletes
    # the WAL, so it grows across rounds and the writers' own auto-checkpoints (every 1000
    # pages) run, and get killed, too.
    with closing(sqlite3.connect(db)) as keeper:
        keeper.execute("SELECT count(*) FROM card").fetchall()
        recorded = _kill_writers_round_after_round(db)
    assert integrity(db) == [("ok",)]
    assert rows(db, "PRAGMA journal_mode") == [("wal" if journal == "auto" else "delete",)]
    assert len(recorded) >= ROUNDS
    assert rows(db, "SELECT count(*) FROM card WHERE goal != ''")[0][0] >= len(recorded)


def _kill_writers_round_after_round(db: Path) -> set[int]:
    """Each round: start writers, SIGKILL them, reopen, check; returns every recorded id."""
    rng = random.Random(20240601)
    recorded: set[int] = set()
    for round_no in range(ROUNDS):
        sides = [db.parent / f"committed-{round_no}-{w}.txt" for w in range(WRITERS)]
        writers = [FORK.Process(target=crash_writer,
                                args=(str(db), str(side), f"r{round_no}w{w}", GOAL_SIZE))
                   for w, side in enumerate(sides)]
        for writer in writers:
            writer.start()
        try:
            target = rng.randint(1, 25)  # the kill lands wherever that writer happens to be
            wait_until(lambda s=sides[0], t=target: len(committed_ids(s)) >= t, timeout=30,
                       what=f"round {round_no}: {target} commits", interval=0.002)
        finally:
            for writer in rng.sample(writers, len(writers)):
                writer.kill()  # SIGKILL
                writer.join(timeout=10)
        assert all(w.exitcode == -9 for w in writers), [w.exitcode for w in writers]
        for side in sides:
            recorded.update(committed_ids(side))

        reopened = open_database(DbLocation(str(db), "flag"))  # always opens, no repair step
        try:
            with reopened.read() as conn:
                present = set(conn.column("SELECT id FROM card"))
        finally:
            reopened.dispose()
        assert integrity(db) == [("ok",)], f"round {round_no}"
        lost = sorted(recorded - present)
        assert lost == [], f"round {round_no}: committed cards lost: {lost[:10]}"
    return recorded
