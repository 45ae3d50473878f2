"""Sixteen processes on one database: no lock error reaches anyone, nothing is claimed twice;
with the write-ahead log and with the rollback journal (a board on a network filesystem)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kanban import cards
from kanban.cards import NewCard
from kanban.state import DbLocation, open_database
from kanban.state.timeutil import utcnow
from tests.support.hostile import FORK, CliRun, hammer, integrity, rows, run_cli
from tests.support.procs import wait_until

API_PROCESSES = 12
CLI_LOOPS = 4  # each keeps one `kanban add` subprocess running: 16 processes in all
HAMMER_S = 5.0
CLI_TAIL_S = 1.0  # no `kanban add` starts this close to the deadline: it would outlast it
SEED_CARDS = 300


def _seed(path: Path, journal: str) -> None:
    db = open_database(DbLocation(str(path), "flag"), create=True, journal=journal)
    try:
        with db.write() as conn:
            cards.create_board(conn, "default", utcnow())
            for i in range(SEED_CARDS):
                cards.add_card(conn, NewCard(title=f"seed {i}", priority=i % 7), utcnow())
    finally:
        db.dispose()  # no connection of this process may cross the fork below


def _cli_loop(db: Path, loop: int, deadline: float, out: list[CliRun]) -> None:
    for n in range(100):
        if time.monotonic() >= deadline - CLI_TAIL_S:
            return
        out.append(run_cli(db, "add", f"cli {loop}-{n}", "--priority", str(n % 5)))


@pytest.mark.parametrize("journal", ["auto", "rollback"])
def test_sixteen_processes_hammering_one_database(tmp_path: Path, journal: str) -> None:
    db = tmp_path / "kanban.db"
    _seed(db, journal)
    wal = journal == "auto"
    deadline = time.monotonic() + HAMMER_S
    outs = [tmp_path / f"hammer-{n}.json" for n in range(API_PROCESSES)]
    procs = [FORK.Process(target=hammer, args=(str(db), n, deadline, str(out)))
             for n, out in enumerate(outs)]
    for proc in procs:  # fork every child before this process starts a thread
        proc.start()
    cli_runs: list[list[CliRun]] = [[] for _ in range(CLI_LOOPS)]
    loops = [threading.Thread(target=_cli_loop, args=(db, n, deadline, cli_runs[n]))
             for n in range(CLI_LOOPS)]
    try:
        for loop in loops:
            loop.start()
        for loop in loops:
            loop.join(timeout=HAMMER_S + 60)
        wait_until(lambda: all(p.exitcode is not None for p in procs), timeout=60,
                   what="every hammer process finished")
    finally:
        for proc in procs:
            if proc.exitcode is None:
                proc.kill()
            proc.join(timeout=10)
    assert [p.exitcode for p in procs] == [0] * API_PROCESSES

    records = [json.loads(out.read_text()) for out in outs]
    errors = [e for r in records for e in r["errors"]]
    cli = [run for runs in cli_runs for run in runs]
    cli_problems = [(r.args, r.code, r.stderr) for r in cli if r.code != 0 or r.stderr]
    assert errors == [], errors[:5]
    assert cli_problems == []
    assert all(runs for runs in cli_runs), "every CLI loop added at least one card"

    claims = [tuple(c) for r in records for c in r["claims"]]
    # a floor, not a benchmark: on 2 busy cores a claim cycle can take 100 ms of lock waits
    assert len(claims) >= 20, f"only {len(claims)} claims: the hammer did not hammer"
    assert all(r["moves"] for r in records), "a process did nothing"
    assert len({(card, attempt) for card, attempt, _ in claims}) == len(claims), "double claim"
    assert len({token for _, _, token in claims}) == len(claims)
    completed = sorted(c for r in records for c in r["completed"])
    assert completed == sorted(card for card, _, _ in claims)

    assert rows(db, "SELECT card_id, attempt FROM run GROUP BY card_id, attempt "
                    "HAVING count(*) > 1") == []
    assert rows(db, "SELECT count(*) FROM card WHERE status = 'running'") == [(0,)]
    assert rows(db, """SELECT c.id FROM card c WHERE c.status = 'done' AND (SELECT count(*)
                       FROM run r WHERE r.card_id = c.id AND r.outcome = 'completed') != 1""") == []
    done = {card for (card,) in rows(db, "SELECT id FROM card WHERE status = 'done'")}
    assert done == set(completed)
    added = {int(r.stdout.strip().lstrip("#")) for r in cli}
    titles = dict(rows(db, "SELECT id, title FROM card WHERE title LIKE 'cli %'"))
    assert added == set(titles)
    assert sum(r["adds"] for r in records) + len(cli) + SEED_CARDS == rows(
        db, "SELECT count(*) FROM card")[0][0]
    assert integrity(db) == [("ok",)]
    assert rows(db, "PRAGMA journal_mode") == [("wal" if wal else "delete",)]
