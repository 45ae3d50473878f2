"""Child-process bodies for test_concurrency; kept light (no pytest) because spawn re-imports."""

from __future__ import annotations

import time
from pathlib import Path

from kanban.service import Kanban
from kanban.state.db import open_database
from kanban.state.paths import DbLocation

GATE_TIMEOUT_S = 60.0


def wait_at_gate(gate: Path, index: int) -> None:
    """Report ready, then wait for `go`: every process starts its loop at the same moment."""
    (gate / f"ready-{index}").touch()
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not (gate / "go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never opened the gate")
        time.sleep(0.001)


def open_gate(gate: Path, processes: int) -> None:
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while len(list(gate.glob("ready-*"))) < processes:
        if time.monotonic() > deadline:
            raise TimeoutError("the workers never became ready")
        time.sleep(0.005)
    (gate / "go").touch()


def increment_counter(path: str, gate: str, index: int, times: int) -> int:
    """Read the counter, then write it plus one, `times` times."""
    db = open_database(DbLocation(path, "flag"))
    try:
        wait_at_gate(Path(gate), index)
        for _ in range(times):
            with db.write() as conn:
                value = int(conn.scalar("SELECT value FROM setting WHERE key = 'counter'"))
                conn.execute("UPDATE setting SET value = ? WHERE key = 'counter'",
                             (str(value + 1),))
        return times
    finally:
        db.dispose()


def claim_until_empty(path: str, gate: str, index: int, pause_s: float = 0.0) -> list[int]:
    """Claim two at a time until no ready card is left; returns the card ids taken.
    `pause_s` between claims lets the others in (a rollback-journal lock goes to whoever
    asks again first, so one process could take every card and nothing would race)."""
    db = open_database(DbLocation(path, "flag"))
    try:
        kb = Kanban(db)
        wait_at_gate(Path(gate), index)
        claimed: list[int] = []
        while batch := kb.claim(2, lease_s=30, host=f"proc-{index}"):
            claimed += [c.card_id for c in batch]
            if pause_s:
                time.sleep(pause_s)
        return claimed
    finally:
        db.dispose()
