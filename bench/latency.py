"""Row 2: dispatch latency of an idle dispatcher, warm forkserver against plain interpreters.

Cards are added one at a time, each after the previous one is done and its worker
reaped, so every card meets an idle dispatcher. Latencies come from the database:
card created (its 'created' event) → claimed (`run.started_at`) → the agent's first
model call (transcript message seq 1, written just before it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    card_settled,
    complete_at_once,
    configure,
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
    ids = []
    try:
        with DispatcherProcess(path, max_workers=2, cold=cold) as dispatcher, \
                kanban_at(path) as kb:
            warm_up(path, dispatcher)  # the dispatcher (and forkserver) up before timing
            for i in range(cards):
                card_id = kb.add_card(NewCard(title=f"latency {i}", goal="measure")).id
                ids.append(card_id)

                def settled(card_id: int = card_id) -> bool:
                    dispatcher.check_alive()
                    return card_settled(reader, card_id)

                wait_until(settled, timeout=60, what=f"card #{card_id}")
        return _latencies(reader, ids)
    finally:
        reader.close()


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
    cold = measure(work, sizes.latency_cold, cold=True)
    n_warm, n_cold = len(warm.first_call_ms), len(cold.first_call_ms)
    sample = f"{n_warm} warm cards, {n_cold} cold cards (cold boots are slow, so fewer)"
    rows = [
        Row("2.1", "dispatch latency p50: created → first model call", "ms",
            percentile(warm.first_call_ms, 50), percentile(cold.first_call_ms, 50),
            "cold: plain interpreter per worker", Goal("value", "<=", 50, "ms"), sample),
        Row("2.2", "dispatch latency p99: created → first model call", "ms",
            percentile(warm.first_call_ms, 99), percentile(cold.first_call_ms, 99),
            "cold", None),
        Row("2.3", "claim latency p50: created → run.started_at", "ms",
            percentile(warm.claim_ms, 50), percentile(cold.claim_ms, 50), "cold dispatcher",
            None),
        Row("2.4", "claim latency p99 (wake-up): created → run.started_at", "ms",
            percentile(warm.claim_ms, 99), percentile(cold.claim_ms, 99), "cold dispatcher",
            Goal("value", "<=", 50, "ms"),
            "the claim does not depend on how workers start; the cold column is a second "
            "sample of the same wake-up path"),
    ]
    return rows
