"""Row 4: memory per running worker (PSS), forked from the warm parent against cold starts.

Slow scripted workers (heartbeats with delays) are sampled while all are running,
once each has begun its transcript (everything imported, the first model call under
way). PSS splits every shared page among the processes sharing it, so PSS summed over
workers is the memory they really cost; the forkserver's own share is in the note.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    configure,
    kanban_at,
    median,
    new_board,
    pss_kib,
    slow_steps,
    wait_until,
    write_script,
)
from bench.report import Goal, Row
from kanban.cards import NewCard


@dataclass(frozen=True)
class Sample:
    worker_kib: list[int]  # one per running worker
    parent_kib: int | None  # the forkserver's own PSS (warm only)
    dispatcher_kib: int | None = None


def floor_kib(path: Path) -> int | None:
    """PSS of a bare interpreter holding one sqlite3 connection that has read the board."""
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('SELECT count(*) FROM card').fetchall(); print('ready', flush=True); "
            "sys.stdin.read()")
    with subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                return None
            return pss_kib(proc.pid)
        finally:
            proc.kill()


def sample(work: Path, workers: int, *, cold: bool) -> Sample:
    path = work / ("cold" if cold else "warm") / "kanban.db"
    new_board(path)
    # Alive long enough to sample: cold workers boot for a second or two first.
    configure(path, model=write_script(path.parent / "slow.json", slow_steps(1.0, 30)))
    reader = Reader(path)
    try:
        with DispatcherProcess(path, max_workers=workers, cold=cold) as dispatcher, \
                kanban_at(path) as kb:
            for i in range(workers):
                kb.add_card(NewCard(title=f"slow {i}"))

            def all_talking() -> list[int]:
                dispatcher.check_alive()
                pids = [pid for (pid,) in reader.all(
                    "SELECT DISTINCT r.pid FROM run r JOIN card c ON c.id = r.card_id "
                    "JOIN message m ON m.run_id = r.id "
                    "WHERE c.status = 'running' AND r.pid IS NOT NULL")]
                return pids if len(pids) == workers else []

            pids = wait_until(all_talking, timeout=120, what=f"{workers} running workers",
                              interval=0.05)
            time.sleep(0.2)  # let the last one settle into its first model call
            worker_kib = [k for pid in pids if (k := pss_kib(pid)) is not None]
            dispatcher_kib = pss_kib(dispatcher.proc.pid)
            parents = {_ppid(pid) for pid in pids} - {None, dispatcher.proc.pid}
            parent_kib = None if cold or len(parents) != 1 else pss_kib(parents.pop() or 0)
            for (card_id,) in reader.all("SELECT id FROM card WHERE status = 'running'"):
                kb.cancel(card_id, reason="benchmark sampled")
        return Sample(worker_kib, parent_kib, dispatcher_kib)
    finally:
        reader.close()


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def run(sizes: Sizes, work: Path) -> list[Row]:
    warm = sample(work, sizes.memory_warm, cold=False)
    cold = sample(work, sizes.memory_cold, cold=True)
    warm_mib = median(warm.worker_kib) / 1024
    cold_mib = median(cold.worker_kib) / 1024
    parent = ("" if warm.parent_kib is None else
              f"; the forkserver itself adds {warm.parent_kib / 1024:.1f} MiB PSS once, "
              f"{warm.parent_kib / 1024 / len(warm.worker_kib):.1f} MiB per worker "
              f"at {len(warm.worker_kib)} workers")
    note = (f"median of {len(warm.worker_kib)} warm and {len(cold.worker_kib)} cold workers "
            f"running a slow script (PSS, /proc/PID/smaps_rollup){parent}")
    least = floor_kib(work / "warm" / "kanban.db")
    floor_mib = None if least is None else least / 1024
    floor_label = "floor: bare interpreter + one sqlite3 connection"
    rows = [
        Row("4.1", "PSS per running worker", "MiB", warm_mib, floor_mib, floor_label,
            Goal("value", "<=", 8, "MiB"), note),
        Row("4.2", "workers per GiB (1024 / PSS)", "", 1024 / warm_mib, 1024 / cold_mib,
            "cold workers per GiB (`python -m worker`)", Goal("value", ">=", 20)),
    ]
    if warm.dispatcher_kib is not None:
        rows.append(Row("4.3", "dispatcher PSS, workers running", "MiB",
                        warm.dispatcher_kib / 1024, floor_mib, floor_label,
                        Goal("value", "<=", 40, "MiB")))
    return rows
