"""Row 11: the everyday operations on a board of a million cards against the same board at
10,000 cards, side by side in one run (ratio = big / small; goal ≤ 1.5x).

Both boards are seeded through the store in bulk (`Conn.many`, 100,000 cards a
transaction, the triggers that keep counts and search current firing as they would) with
the CLI benchmark's mix of states. Each operation is timed in process (no interpreter
start to hide behind), the two boards alternating, median of the repeats:
- board: `kanban board`'s read (counts, each column's first cards, header) as the web
  board's first page renders it (`BoardSnapshot.to_json`);
- show: `kanban show`'s read of a card in the middle of the board;
- add: `kanban add` of one card;
- claim: a claim and its completion, as the dispatcher and a worker run them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import Sizes, kanban_at, median, new_board, status_of
from bench.report import Goal, Row

GOAL = Goal("ratio", "<=", 1.5)
CHUNK = 100_000  # cards per write transaction while seeding


def seed(path: Path, cards: int) -> float:
    """A board of `cards` cards in the CLI mix (running ones as ready); seconds it took."""
    from kanban.state.timeutil import utcnow

    new_board(path)
    now = utcnow()
    columns = ("board", "title", "goal", "context", "status", "priority", "profile", "depth",
               "created_by", "attempt", "max_attempts", "retry_base", "run_after",
               "created_at", "updated_at", "input_tokens", "output_tokens", "cached_tokens")
    sql = (f"INSERT INTO card ({', '.join(columns)}) "
           f"VALUES ({', '.join('?' for _ in columns)})")

    def rows(start: int, stop: int) -> Iterator[tuple[Any, ...]]:
        for i in range(start, stop):
            status = status_of(i)
            yield ("default", f"bench card {i}", f"goal of card {i}", "",
                   "ready" if status == "running" else status, i % 3, "default", 0, "user",
                   0, 3, 0, now, now, now, 0, 0, 0)

    started = time.perf_counter()
    with kanban_at(path) as kb:
        for start in range(0, cards, CHUNK):
            with kb.db.write() as conn:
                conn.many(sql, rows(start, min(cards, start + CHUNK)))
    return time.perf_counter() - started


def operations(kb: Any, middle: int) -> dict[str, Callable[[], None]]:
    from kanban import transitions
    from kanban.cards import NewCard, card_detail
    from kanban.queries import board_snapshot
    from kanban.transitions import Actor

    def board() -> None:
        with kb.db.read() as conn:
            board_snapshot(conn, "default", now=kb.clock()).to_json()

    def show() -> None:
        with kb.db.read() as conn:
            card_detail(conn, middle)

    def add() -> None:
        kb.add_card(NewCard("one more card", goal="scale"))

    def claim() -> None:
        (got,) = kb.claim(1, lease_s=600)
        with kb.db.write() as conn:
            transitions.complete(conn, got.card_id, "ok", now=kb.clock(),
                                 actor=Actor("bench", got.claim_token))

    return {"board": board, "show": show, "add": add, "claim": claim}


def timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def run(sizes: Sizes, work: Path) -> list[Row]:
    work.mkdir(parents=True, exist_ok=True)
    small_n, big_n = sizes.scale_cards
    paths = {n: work / f"board-{n}" / "kanban.db" for n in (small_n, big_n)}
    seeded = {n: seed(path, n) for n, path in paths.items()}
    times: dict[int, dict[str, list[float]]] = {n: {} for n in paths}
    with kanban_at(paths[small_n]) as small, kanban_at(paths[big_n]) as big:
        boards = {small_n: operations(small, small_n // 2), big_n: operations(big, big_n // 2)}
        for round_ in range(sizes.scale_repeats + 1):  # round 0 warms caches, unmeasured
            for name in boards[small_n]:
                for n in (small_n, big_n):
                    took = timed(boards[n][name])
                    if round_:
                        times[n].setdefault(name, []).append(took)
    rows = []
    for m, name in enumerate(boards[small_n], start=1):
        rows.append(Row(
            f"11.{m}", f"{name} at {big_n:,} cards", "ms", median(times[big_n][name]) * 1000,
            median(times[small_n][name]) * 1000, f"the same at {small_n:,} cards", GOAL,
            (f"in process, median of {sizes.scale_repeats}, boards alternating; seeding "
             f"through the store took {seeded[big_n]:.1f} s for {big_n:,} cards "
             f"({big_n / seeded[big_n]:,.0f} cards/s); file {_mib(paths[big_n]):.0f} MiB "
             f"({_mib(paths[big_n]) * 2**20 / big_n:,.0f} bytes a card)") if m == 1 else ""))
    return rows


def _mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 2**20
