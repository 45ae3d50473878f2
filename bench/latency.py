"""Row 2: dispatch latency of an idle dispatcher against its floor, and against cold starts.

Cards are added one at a time, each after the previous one is done and its worker
reaped, so every card meets an idle dispatcher. Latencies come from the database:
card created (its 'created' event) → claimed (`run.started_at`) → the agent's first
model call (transcript message seq 1, written just before it).

The floor does the same work with nothing around it, in one process on the same schema,
WAL and synchronous setting: commit a card, claim it (one UPDATE … RETURNING in its own
transaction), then fork and exec an empty program (`true`) and reap it.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    card_settled,
    complete_at_once,
    configure,
    db_time,
    kanban_at,
    new_board,
    percentile,
    ts,
    wait_until,
    warm_up,
    write_script,
)
from bench.report import Goal, Row
from kanban.cards import NewCard


@dataclass(frozen=True)
class Latencies:
    """Per card, in milliseconds."""

    claim_ms: list[float]
    first_call_ms: list[float]


def measure(work: Path, cards: int, *, cold: bool) -> Latencies:
    path = work / ("cold" if cold else "warm") / "kanban.db"
    new_board(path)
    configure(path, model=write_script(path.parent / "once.json", complete_at_once()))
    reader = Reader(path)
    try:
        with DispatcherProcess(path, max_workers=2, cold=cold) as dispatcher:
            warm_up(path, dispatcher)  # the dispatcher (and forkserver) up before timing
            ids = _one_at_a_time(path, reader, dispatcher, cards, "latency")
        return _latencies(reader, ids)
    finally:
        reader.close()


def measure_sdk(work: Path, cards: int) -> list[float]:
    """created → the worker's first request at an OpenAI-compatible server (a local one),
    ms per card: the real SDK client made in the worker, its request sent and received."""
    from tests.support.llm_bodies import tool_results
    from tests.support.llm_server import LLMServer, text_reply, tool_reply

    arrivals: list[float] = []  # each card's first request, in card order

    def respond(body: dict[str, object]) -> object:
        if tool_results(body):
            return text_reply("done")
        arrivals.append(time.time())
        return tool_reply(("kanban_complete", {"summary": "ok"}))

    path = work / "sdk" / "kanban.db"
    new_board(path)
    configure(path, model="openai:bench")
    reader = Reader(path)
    try:
        with LLMServer(responder=respond) as server, \
                DispatcherProcess(path, max_workers=2, env=server.env()) as dispatcher:
            warm_up(path, dispatcher)
            arrivals.clear()  # the warm-up card's
            ids = _one_at_a_time(path, reader, dispatcher, cards, "sdk latency")
        assert len(arrivals) == len(ids), f"{len(arrivals)} first requests for {len(ids)} cards"
        created = [reader.one("SELECT at FROM event WHERE card_id = ? AND kind = 'created'",
                              card_id) for card_id in ids]
        return [(arrived - ts(at)) * 1000 for arrived, at in zip(arrivals, created, strict=True)]
    finally:
        reader.close()


def _one_at_a_time(path: Path, reader: Reader, dispatcher: DispatcherProcess, cards: int,
                   title: str) -> list[int]:
    """Add `cards` cards, each once the previous one is done and its worker reaped (so each
    meets an idle dispatcher); their ids."""
    ids = []
    with kanban_at(path) as kb:
        for i in range(cards):
            card_id = kb.add_card(NewCard(title=f"{title} {i}", goal="measure")).id
            ids.append(card_id)

            def settled(card_id: int = card_id) -> bool:
                dispatcher.check_alive()
                return card_settled(reader, card_id)

            wait_until(settled, timeout=60, what=f"card #{card_id}")
    return ids


_FLOOR_CARD = (
    "INSERT INTO card (board, title, goal, context, status, priority, profile, depth, "
    "created_by, attempt, max_attempts, retry_base, run_after, created_at, updated_at, "
    "input_tokens, output_tokens, cached_tokens) VALUES ('default', 'floor', '', '', 'ready', "
    "0, 'default', 0, 'user', 0, 3, 0, ?, ?, ?, 0, 0, 0)")


def floor(work: Path, cards: int) -> Latencies:
    """Commit a card, claim it, fork + exec an empty program: no dispatcher, no worker."""
    from bench.claims import _RAW_CLAIM

    path = work / "floor" / "kanban.db"
    new_board(path)
    empty = shutil.which("true") or "/bin/true"
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON"):
        conn.execute(f"PRAGMA {pragma}")
    claim, started = [], []
    try:
        for _ in range(cards):
            created = time.perf_counter()
            at = db_time(time.time())
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_FLOOR_CARD, (at, at, at))
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_RAW_CLAIM, (os.urandom(16).hex(), at, at, at, at)).fetchone()
            conn.execute("COMMIT")
            claimed = time.perf_counter()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                os.execv(empty, [empty])
            os.waitpid(pid, 0)
            claim.append((claimed - created) * 1000)
            started.append((time.perf_counter() - created) * 1000)
    finally:
        conn.close()
    return Latencies(claim, started)


def _latencies(reader: Reader, ids: list[int]) -> Latencies:
    claim, first = [], []
    for card_id in ids:
        created = reader.one("SELECT at FROM event WHERE card_id = ? AND kind = 'created'",
                             card_id)
        started, seq1 = reader.all(
            "SELECT r.started_at, m.at FROM run r JOIN message m ON m.run_id = r.id "
            "WHERE r.card_id = ? AND m.seq = 1 ORDER BY r.id LIMIT 1", card_id)[0]
        claim.append((ts(started) - ts(created)) * 1000)
        first.append((ts(seq1) - ts(created)) * 1000)
    return Latencies(claim, first)


def run(sizes: Sizes, work: Path) -> list[Row]:
    warm = measure(work, sizes.latency_warm, cold=False)
    least = floor(work, sizes.latency_warm)
    sdk = measure_sdk(work, sizes.latency_warm)
    cold = measure(work, sizes.latency_cold, cold=True)
    n_warm, n_cold = len(warm.first_call_ms), len(cold.first_call_ms)
    sample = (f"{n_warm} warm cards and {n_warm} floor cycles; {n_cold} cold cards (cold boots "
              "are slow, so fewer)")
    floor_label = "floor: commit, claim, fork + exec `true`"
    return [
        Row("2.1", "dispatch latency p50: created → first model call", "ms",
            percentile(warm.first_call_ms, 50), percentile(least.first_call_ms, 50),
            floor_label, Goal("value", "<=", 6, "ms"), sample),
        Row("2.2", "dispatch latency p99: created → first model call", "ms",
            percentile(warm.first_call_ms, 99), percentile(least.first_call_ms, 99),
            floor_label, Goal("value", "<=", 10, "ms")),
        Row("2.3", "claim latency p50: created → run.started_at", "ms",
            percentile(warm.claim_ms, 50), percentile(least.claim_ms, 50),
            "floor: commit a card, then claim it", None),
        Row("2.4", "claim latency p99 (wake-up): created → run.started_at", "ms",
            percentile(warm.claim_ms, 99), percentile(least.claim_ms, 99),
            "floor: commit a card, then claim it", Goal("value", "<=", 2, "ms"),
            "the floor has no wake-up to wait for: the difference is the dispatcher noticing"),
        Row("2.5", "dispatch latency p50, warm forkserver vs cold workers", "ms",
            percentile(warm.first_call_ms, 50), percentile(cold.first_call_ms, 50),
            "cold: a plain interpreter per worker", None),
        Row("2.6", "dispatch latency p50, openai SDK: created → request at a local server",
            "ms", percentile(sdk, 50), percentile(warm.first_call_ms, 50),
            "the scripted model's first call (row 2.1)", None,
            f"{len(sdk)} cards; the worker makes its SDK client (TLS context shared from the "
            "forkserver) and sends the request over loopback"),
        Row("2.7", "dispatch latency p99, openai SDK: created → request at a local server",
            "ms", percentile(sdk, 99), percentile(warm.first_call_ms, 99),
            "the scripted model's first call (row 2.2)", None),
    ]
