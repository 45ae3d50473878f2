"""Row 16: a /metrics scrape on a board of 100,000 cards, against the same at 1,000 cards.

Both boards are seeded through the store in bulk with the CLI benchmark's mix of states,
eight profiles, one run a card and two model calls a run over four models (the triggers
that keep `card_count` and `usage_total` firing as they would), and a notification outbox
with a long delivered history and a short backlog. Timed in process, the two boards
alternating, median of the repeats:
- 16.1: a scrape as the dispatcher's endpoint answers it: the aggregates read in one read
  transaction, then encoded in Prometheus' text format (goal ≤ 50 ms);
- 16.2: what the same token and cost numbers cost summed from every call (`kanban
  stats`' read), against 16.1 on the same board: why the scrape reads kept counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.cli import status_of
from bench.common import Sizes, kanban_at, median, new_board
from bench.report import Goal, Row

PROFILES = 8
MODELS = ("openai:gpt-4o", "openai:gpt-4o-mini", "anthropic:claude-sonnet", "local:llama")
CHUNK = 50_000


def sizes_of(sizes: Sizes) -> tuple[tuple[int, int], int]:
    """(small board, big board) in cards, and the repeats."""
    if sizes.name == "smoke":
        return (100, 1_000), 3
    return (1_000, 100_000), 31


def seed(path: Path, cards: int) -> None:
    from kanban.state.timeutil import utcnow

    new_board(path)
    now = utcnow()
    with kanban_at(path) as kb:
        for start in range(0, cards, CHUNK):
            stop = min(cards, start + CHUNK)
            with kb.db.write() as conn:
                conn.many(_CARD, _cards(start, stop, now))
                conn.many(_RUN, ((i + 1, now, now) for i in range(start, stop)))
                conn.many(_USAGE, _calls(start, stop, now))
                conn.many(_OUTBOX, _outbox_rows(start, stop, now))


_CARD = ("INSERT INTO card (board, title, goal, context, status, priority, profile, depth, "
         "created_by, attempt, max_attempts, retry_base, run_after, created_at, updated_at, "
         "input_tokens, output_tokens, cached_tokens) VALUES (?, ?, ?, '', ?, 0, ?, 0, 'user', "
         "1, 3, 0, ?, ?, ?, 0, 0, 0)")
_RUN = ("INSERT INTO run (card_id, attempt, claim_token, started_at, heartbeat_at, "
        "input_tokens, output_tokens, cached_tokens) VALUES (?, 1, 'bench', ?, ?, 0, 0, 0)")
_USAGE = ("INSERT INTO usage (run_id, model, input_tokens, output_tokens, cached_tokens, at, "
          "cost) VALUES (?, ?, ?, ?, ?, ?, ?)")
_OUTBOX = ("INSERT INTO notify_outbox (subscription_id, board, card_id, event, target, "
           "payload, status, attempts, next_attempt_at, created_at, updated_at) VALUES "
           "(1, 'default', ?, 'done', 'file:/dev/null', '{}', ?, 1, ?, ?, ?)")


def _cards(start: int, stop: int, now: Any) -> Iterator[tuple[Any, ...]]:
    for i in range(start, stop):
        status = status_of(i)
        yield ("default", f"bench card {i}", f"goal {i}",
               "ready" if status == "running" else status, f"profile-{i % PROFILES}",
               now, now, now)


def _calls(start: int, stop: int, now: Any) -> Iterator[tuple[Any, ...]]:
    for i in range(start, stop):
        for call in range(2):
            model = MODELS[(i + call) % len(MODELS)]
            yield (i + 1, model, 1000 + i % 97, 50 + i % 13, i % 7, now,
                   None if model.startswith("local:") else 0.0012)


def _outbox_rows(start: int, stop: int, now: Any) -> Iterator[tuple[Any, ...]]:
    for i in range(start, stop, 5):
        yield (i + 1, "delivered" if i % 500 else "pending", now, now, now)


def scrape(kb: Any) -> Callable[[], None]:
    from prometheus_client import CollectorRegistry, generate_latest

    from kanban.metrics import BoardCollector

    registry = CollectorRegistry()
    registry.register(BoardCollector(kb.db))

    def once() -> None:
        generate_latest(registry)

    return once


def summed(kb: Any) -> Callable[[], None]:
    from kanban.stats import stats

    def read() -> None:
        with kb.db.read() as conn:
            stats(conn, kb.clock())

    return read


def run(sizes: Sizes, work: Path) -> list[Row]:
    work.mkdir(parents=True, exist_ok=True)
    (small_n, big_n), repeats = sizes_of(sizes)
    paths = {n: work / f"board-{n}" / "kanban.db" for n in (small_n, big_n)}
    started = time.perf_counter()
    for n, path in paths.items():
        seed(path, n)
    seeded = time.perf_counter() - started
    times: dict[tuple[str, int], list[float]] = {}
    with kanban_at(paths[small_n]) as small, kanban_at(paths[big_n]) as big:
        actions = {(name, n): make(kb) for name, make in (("scrape", scrape), ("sum", summed))
                   for n, kb in ((small_n, small), (big_n, big))}
        for round_ in range(repeats + 1):  # round 0 warms caches, unmeasured
            for key, action in actions.items():
                began = time.perf_counter()
                action()
                if round_:
                    times.setdefault(key, []).append(time.perf_counter() - began)
    ms = {key: median(values) * 1000 for key, values in times.items()}
    return [
        Row("16.1", f"/metrics scrape (read + encode) at {big_n:,} cards", "ms",
            ms[("scrape", big_n)], ms[("scrape", small_n)], f"the same at {small_n:,} cards",
            Goal("value", "<=", 50, "ms"),
            f"in process, median of {repeats}, boards alternating; {big_n * 2:,} model calls "
            f"and {big_n // 5:,} outbox rows; seeding both took {seeded:.1f} s"),
        Row("16.2", f"the same spend summed from every call at {big_n:,} cards", "ms",
            ms[("sum", big_n)], ms[("scrape", big_n)], "the scrape (16.1)", None,
            "`kanban stats`' read: the usage sums and windows a scrape does not do"),
    ]
