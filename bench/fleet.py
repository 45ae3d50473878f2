"""Rows 14: many agents on one host. N workers at once on a SQLite board, each streaming its
answer from a local OpenAI-compatible server over ~20 s (the real `openai` SDK in every
worker, heartbeats and live activity written as they go), beside a writer committing 100
times a second:

- 14.1: the dispatcher's CPU from the first card added to the last one settled, against the
  same dispatcher idle (row 13.1's measure);
- 14.2: the writer's wait for SQLite's write lock, p99, against the same writer alone;
- 14.3: PSS per worker, sampled while all N stream, against a bare interpreter holding one
  sqlite3 connection;
- 14.4: what planning needs: workers per GiB, and in its note workers per core (the CPU
  the whole fleet used over the wall time of the run, per worker).
Every card must end done after exactly one run (no lease lost, no attempt spent twice).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    configure,
    kanban_at,
    median,
    new_board,
    percentile,
    pss_kib,
    wait_until,
    warm_up,
)
from bench.idle import TICKS_PER_S, Writer, cpu_s, window
from bench.memory import floor_kib
from bench.report import Goal, Row
from kanban.cards import NewCard


@dataclass(frozen=True)
class FleetSize:
    workers: int
    stream_s: float  # how long each answer streams
    chunks: int  # deltas per answer


SIZES = {"full": FleetSize(400, 20.0, 40), "quick": FleetSize(100, 10.0, 20),
         "smoke": FleetSize(4, 1.0, 4)}


def run(sizes: Sizes, work: Path) -> list[Row]:
    from tests.support.llm_bodies import tool_results
    from tests.support.llm_server import LLMServer, text_reply, tool_reply

    size = SIZES.get(sizes.name, SIZES["full"])
    path = work / "fleet" / "kanban.db"
    new_board(path)
    configure(path, model="openai:bench")
    streamed = tool_reply(("kanban_complete", {"summary": "streamed"}),
                          text="x" * (8 * size.chunks), chunk_chars=8,
                          chunk_delay=size.stream_s / size.chunks)

    def respond(body: dict[str, Any]) -> Any:
        return text_reply("done") if tool_results(body) else streamed

    reader = Reader(path)
    try:
        with LLMServer(responder=respond) as server, \
                DispatcherProcess(path, max_workers=size.workers, env=server.env()) as dispatcher:
            warm_up(path, dispatcher)  # the forkserver up, and a card for the writer's comments
            idle = window(dispatcher.proc.pid, 2.0)
            alone = Writer(path).run_for(2.0)
            measured = _run_fleet(path, reader, dispatcher, size)
        runs = reader.all("SELECT c.status, count(r.id), max(c.attempt) FROM card c "
                          "LEFT JOIN run r ON r.card_id = c.id WHERE c.title LIKE 'stream %' "
                          "GROUP BY c.id")
    finally:
        reader.close()
    once = sum(1 for status, count, attempt in runs
               if status == "done" and count == 1 and attempt == 1)
    return _rows(size, measured, idle, alone, once, floor_kib(path))


@dataclass(frozen=True)
class Measured:
    dispatcher_pct: float
    fleet_pct: float  # every process of the fleet (workers, forkserver, dispatcher)
    waits_ms: list[float]
    worker_kib: list[int]
    wall_s: float


def _run_fleet(path: Path, reader: Reader, dispatcher: DispatcherProcess,
               size: FleetSize) -> Measured:
    writer = Writer(path)
    writer.start()
    before, started = cpu_s(dispatcher.proc.pid), time.monotonic()
    fleet_before = _tree_cpu_s(dispatcher.proc.pid)  # the dispatcher and its forkserver
    with kanban_at(path) as kb:
        for i in range(size.workers):
            kb.add_card(NewCard(title=f"stream {i}", goal="answer slowly"))

    def all_started() -> list[int]:
        """The running workers once every card has one (None before): on a slow host the
        first may have finished before the last started, so not all N need be running."""
        dispatcher.check_alive()
        waiting = reader.one("SELECT count(*) FROM card c WHERE c.title LIKE 'stream %' AND "
                             "NOT EXISTS (SELECT 1 FROM run r WHERE r.card_id = c.id AND "
                             "r.pid IS NOT NULL)")
        if waiting:
            return []
        return [pid for (pid,) in reader.all(
            "SELECT r.pid FROM run r JOIN card c ON c.id = r.card_id "
            "WHERE c.status = 'running' AND r.pid IS NOT NULL")]

    pids = wait_until(all_started, timeout=60 + size.workers / 2,
                      what=f"{size.workers} workers started", interval=0.2)
    worker_kib = [k for pid in pids if (k := pss_kib(pid)) is not None]

    def all_settled() -> bool:
        dispatcher.check_alive()
        return reader.one("SELECT count(*) FROM card WHERE status NOT IN "
                          "('done', 'failed', 'cancelled')") == 0

    wait_until(all_settled, timeout=120 + size.stream_s * 3, what="every card settled",
               interval=0.2)
    wall = time.monotonic() - started
    used = cpu_s(dispatcher.proc.pid) - before
    waits = writer.stop()
    fleet = _tree_cpu_s(dispatcher.proc.pid) - fleet_before
    return Measured(100 * used / wall, 100 * fleet / wall, waits, worker_kib, wall)


def _tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and every living descendant, with what their reaped children
    used (a worker that exited counts in its forkserver's children's time)."""
    stats: dict[int, list[str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            stats[int(stat.parent.name)] = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, fields in stats.items() if int(fields[1]) == parent]
        tree.update(kids)
        frontier.extend(kids)
    return sum(sum(int(f) for f in stats[pid][11:15]) for pid in tree if pid in stats) \
        / TICKS_PER_S


def _rows(size: FleetSize, got: Measured, idle: float, alone: list[float], once: int,
          floor: int | None) -> list[Row]:
    worker_mib = median(got.worker_kib) / 1024 if got.worker_kib else float("nan")
    per_core = size.workers / max(got.fleet_pct / 100, 1e-9)
    note = (f"{size.workers} workers streaming {size.stream_s:g} s each; {once} of "
            f"{size.workers} cards done after exactly one run; run took {got.wall_s:.1f} s")
    label = "floor: bare interpreter + one sqlite3 connection"
    return [
        Row("14.1", f"dispatcher CPU, {size.workers} workers streaming", "% core",
            got.dispatcher_pct, idle, "the same dispatcher idle", Goal("value", "<=", 10, "%"),
            note=note),
        Row("14.2", f"writer's wait for the write lock p99, {size.workers} workers", "ms",
            percentile(got.waits_ms, 99), percentile(alone, 99),
            "the same writer, the dispatcher idle", Goal("value", "<=", 20, "ms"),
            note=f"{len(got.waits_ms)} commits beside the fleet"),
        Row("14.3", f"PSS per worker, {size.workers} streaming", "MiB", worker_mib,
            None if floor is None else floor / 1024, label, Goal("value", "<=", 8, "MiB"),
            note=f"median of {len(got.worker_kib)} workers (their model calls made by the "
                 f"gateway)"),
        Row("14.4", "streaming workers per GiB (1024 / PSS)", "", 1024 / worker_mib,
            None if floor is None else 1024 * 1024 / floor,
            "bare interpreters per GiB (the floor above)", None,
            note=f"and {per_core:.0f} streaming workers per core: dispatcher, forkserver and "
                 f"workers used {got.fleet_pct:.0f}% of a core over the run, spawning and "
                 f"reaping included"),
        Row("14.5", "cards done after exactly one run", "cards", once, size.workers,
            "cards added", Goal("ratio", ">=", 1.0)),
    ]
