"""The board's everyday reads do the same work on a big board as on a small one.

Work is counted as SQLite virtual-machine instructions (a progress handler), which does
not depend on the machine's load: the board view (`kanban board`, /api/board), the web
board's first page (the snapshot and the board list), a card's detail, a column's next page
and adding a card run on a board of every state, then on the same board grown tenfold. An
index seek is one instruction whatever the size; visiting every blocked card, or counting
every card, grows with the board and fails here (`test_query_plans` only sees scans).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from kanban.cards import NewCard, boards_plan, card_detail_plan
from kanban.columns import board_cards_plan, column_plan
from kanban.queries import board_snapshot_plan
from kanban.service import Kanban
from kanban.state.plans import run_plan
from kanban.state.store import Database
from tests.support.db import DEFAULT_BOARD, FakeClock, open_sqlite

SMALL, GROWTH = 2_000, 10
STEP = 1  # instructions per progress-handler call: count them all
# A state per card by id, cycling: every column has more cards than a page shows.
MIX = ("blocked", "todo", "ready", "ready", "failed", "cancelled", "scheduled", "triage",
       "waiting", "review", "done", "done", "done", "done", "done", "done", "done", "done",
       "done", "done")

_SEED = """
WITH RECURSIVE n(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM n WHERE i < :last)
INSERT INTO card (id, board, title, goal, context, status, priority, profile, depth,
                  created_by, attempt, max_attempts, retry_base, run_after, input_tokens,
                  output_tokens, cached_tokens, cost, created_at, updated_at)
SELECT i, :board, 'card ' || i, 'a goal', '', {status}, i % 3, 'default', 0, 'user', 0, 3, 0,
       :later, 0, 0, 0, 0, :at, :at FROM n
"""


def grow(db: Database, clock: FakeClock, to: int) -> None:
    """Cards up to id `to`, in the MIX of states (triggers keep the counts)."""
    status = "CASE i % {n} {whens} END".format(n=len(MIX), whens=" ".join(
        f"WHEN {k} THEN '{s}'" for k, s in enumerate(MIX)))
    with db.write() as conn:
        first = int(conn.scalar("SELECT coalesce(max(id), 0) FROM card")) + 1
        conn.execute(_SEED.format(status=status),
                     {"first": first, "last": to, "board": DEFAULT_BOARD,
                      "at": clock.now - timedelta(days=1), "later": clock.now + timedelta(days=1)})


def instructions(db: Database, action: Callable[[], object]) -> int:
    """VM instructions the action runs on this thread's SQLite connection (to within STEP)."""
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    with db.read() as conn:
        raw: sqlite3.Connection = conn.raw
    raw.set_progress_handler(tick, STEP)
    try:
        action()
    finally:
        raw.set_progress_handler(None, STEP)
    return count[0] * STEP


def everyday_reads(kb: Kanban, clock: FakeClock, middle: int) -> dict[str, Callable[[], object]]:
    def read(plan_of: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            with kb.db.read() as conn:
                return run_plan(conn, plan_of())  # type: ignore[arg-type]
        return run

    def next_pages() -> None:
        """Each column's second page, and a page from the middle of the column."""
        with kb.db.read() as conn:
            for status in ("ready", "done", "blocked", "scheduled"):
                page = run_plan(conn, column_plan(DEFAULT_BOARD, status, limit=20))
                assert page.next is not None
                run_plan(conn, column_plan(DEFAULT_BOARD, status, limit=20, after=page.next))
                run_plan(conn, column_plan(DEFAULT_BOARD, status, limit=20,
                                           after=halfway[status]))

    with kb.db.read() as conn:  # a card about halfway down each column, as a page cursor
        halfway = {status: run_plan(conn, board_cards_plan([int(conn.scalar(
            "SELECT max(id) FROM card WHERE status = :s AND id <= :middle",
            {"s": status, "middle": middle}))]))[0][2].cursor()
            for status in ("ready", "done", "blocked", "scheduled")}

    return {
        "board view": read(lambda: board_snapshot_plan(DEFAULT_BOARD, now=clock.now)),
        "board list": read(boards_plan),
        "card detail": read(lambda: card_detail_plan(middle)),
        "next pages": next_pages,
        "add": lambda: kb.add_card(NewCard("one more", goal="scale")),
    }


def test_board_reads_do_not_grow_with_the_board(tmp_path: Path) -> None:
    clock = FakeClock()
    db = open_sqlite(tmp_path / "kanban.db")
    try:
        kb = Kanban(db, clock=clock)
        counted: list[dict[str, int]] = []
        for size in (SMALL, SMALL * GROWTH):
            grow(db, clock, size)
            with db.write() as conn:  # an approval waits on one blocked card
                conn.execute("INSERT INTO approval (card_id, command, pattern, decision, "
                             "requested_at) SELECT max(id), 'rm -rf x', 'rm', 'pending', :at "
                             "FROM card WHERE status = 'blocked'", {"at": clock.now})
            reads = everyday_reads(kb, clock, size // 2)
            counted.append({name: instructions(db, action) for name, action in reads.items()})
        small, big = counted
        assert all(small.values())  # the counter counted
        grown = {name: round(big[name] / small[name], 2) for name in small}
        assert all(ratio <= 1.2 for ratio in grown.values()), grown
    finally:
        db.dispose()
