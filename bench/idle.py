"""Row 13: what an idle dispatcher costs on a board of 100,000 cards.

A dispatcher with nothing to claim still wakes: its slow tick (leases, promotions, waiting
cards, cron, its own heartbeat) once a second, and a look at the board (`PRAGMA
data_version` and the wake-up counter, about 15 µs of Python) each time kanban's writers
touch the board's wake-up file, which they do only after a commit a dispatcher acts on
(state/wakefile.py). Woken by every commit instead (inotify on the write-ahead log), it
paid 1.3-4.8% of a core beside the writer below. Neither cost may grow with the board.
Measured from /proc (user + system CPU of the dispatcher):
- 13.1: nothing else writes;
- 13.2: another process commits 100 times a second (a comment each);
- 13.3: that writer's wait for SQLite's write lock, p99, beside the dispatcher, against
  the same writer with no dispatcher (the baseline), in the same run.
13.1's baseline is a bare interpreter asleep over the same window (the floor: nothing);
13.2's is 13.1 (what the writer's commits add is the row's ratio).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import (
    DispatcherProcess,
    Sizes,
    complete_at_once,
    configure,
    fill_cards,
    new_board,
    percentile,
    warm_up,
    write_script,
)
from bench.report import Goal, Row

WRITES_PER_S = 100
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


class Writer:
    """Commits a comment WRITES_PER_S times a second; records each wait for the lock."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, timeout=30, isolation_level=None,
                                    check_same_thread=False)
        self.conn.execute("PRAGMA busy_timeout = 30000")
        self.card = self.conn.execute("SELECT max(id) FROM card").fetchone()[0]
        self.waits_ms: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        period = 1 / WRITES_PER_S
        next_at = time.monotonic()
        while not self.stop.is_set():
            started = time.perf_counter()
            self.conn.execute("BEGIN IMMEDIATE")
            self.waits_ms.append((time.perf_counter() - started) * 1000)
            self.conn.execute("INSERT INTO comment (card_id, author, body, at) VALUES "
                              "(?, 'bench', 'a note', datetime('now'))", (self.card,))
            self.conn.execute("COMMIT")
            next_at += period
            self.stop.wait(max(0.0, next_at - time.monotonic()))

    def run_for(self, seconds: float) -> list[float]:
        self.thread.start()
        self.stop.wait(seconds)
        self.stop.set()
        self.thread.join()
        self.conn.close()
        return self.waits_ms


def window(pid: int, seconds: float) -> float:
    """Percent of one core `pid` used over `seconds`."""
    before, started = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_s(pid) - before) / (time.monotonic() - started)


def asleep_cpu(seconds: float) -> float:
    """A bare interpreter asleep for `seconds`: what doing nothing costs, measured alike."""
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]) as proc:
        try:
            return window(proc.pid, seconds)
        finally:
            proc.kill()


def run(sizes: Sizes, work: Path) -> list[Row]:
    cards, seconds = (2_000, 0.5) if sizes.name == "smoke" else (100_000, 10.0)
    path = work / "kanban.db"
    new_board(path)
    fill_cards(path, cards, status_of=lambda i: "done")  # nothing to claim: idle
    configure(path, model=write_script(work / "finish.json", complete_at_once()))
    alone = Writer(path).run_for(seconds)  # the baseline: no dispatcher at all
    floor = asleep_cpu(seconds)
    with DispatcherProcess(path, max_workers=4) as dispatcher:
        warm_up(path, dispatcher)
        quiet = window(dispatcher.proc.pid, seconds)
        writer = Writer(path)
        busy_box: list[float] = []
        measuring = threading.Thread(
            target=lambda: busy_box.append(window(dispatcher.proc.pid, seconds)))
        measuring.start()
        beside = writer.run_for(seconds)
        measuring.join()
        dispatcher.check_alive()
    note = f"{cards:,} cards, {seconds:g} s windows, /proc CPU of the dispatcher process"
    return [
        Row("13.1", "idle dispatcher CPU, no writer", "% core", quiet, floor,
            "a bare interpreter asleep", Goal("value", "<=", 0.3, "%"), note=note),
        Row("13.2", f"idle dispatcher CPU, a writer at {WRITES_PER_S} commits/s", "% core",
            busy_box[0], quiet, "the same dispatcher, no writer (13.1)",
            Goal("value", "<=", 1.0, "%"), note=note),
        Row("13.3", "writer's wait for the write lock, p99", "ms", percentile(beside, 99),
            percentile(alone, 99), "the same writer, no dispatcher",
            Goal("value", "<=", 5.0, "ms"),
            note=f"{len(beside)} and {len(alone)} commits; p50 {percentile(beside, 50):.3f} ms "
                 f"beside, {percentile(alone, 50):.3f} ms alone"),
    ]

