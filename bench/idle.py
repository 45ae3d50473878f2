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

import json
import os
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


# The writer runs in a process of its own: the bench's process also serves the fleet's
# model answers (400 threads of tests.support.llm_server), and a writer thread there
# measured its wait for the GIL after each statement as a wait for SQLite's lock.
_WRITER = """
import json, sqlite3, sys, threading, time
conn = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
conn.execute("PRAGMA busy_timeout = 30000")
card = conn.execute("SELECT max(id) FROM card").fetchone()[0]
stop, waits = threading.Event(), []
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
period, next_at = 1 / float(sys.argv[2]), time.monotonic()
while not stop.is_set():
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    waits.append((time.perf_counter() - started) * 1000)
    conn.execute("INSERT INTO comment (card_id, author, body, at) VALUES "
                 "(?, 'bench', 'a note', datetime('now'))", (card,))
    conn.execute("COMMIT")
    next_at += period
    stop.wait(max(0.0, next_at - time.monotonic()))
conn.close()
print(json.dumps(waits), flush=True)
"""


class Writer:
    """Another process committing a comment WRITES_PER_S times a second; `stop` returns
    each of its waits for the write lock (BEGIN IMMEDIATE), in ms."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(self.path), str(WRITES_PER_S)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the writer process did not start")

    def stop(self) -> list[float]:
        assert self.proc is not None
        out, _ = self.proc.communicate("", timeout=60)  # end of its input: it stops
        if self.proc.returncode != 0:
            raise RuntimeError(f"the writer process exited with {self.proc.returncode}")
        return [float(w) for w in json.loads(out.strip().splitlines()[-1])]

    def run_for(self, seconds: float) -> list[float]:
        self.start()
        time.sleep(seconds)
        return self.stop()


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

