"""Claim and complete at the limit: the statements one cycle sends to SQLite, counted by the
driver's trace callback. The driver reports a statement again for each trigger program it
runs (with the same text): consecutive repeats are one statement."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kanban import claims, transitions
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.sqlite import SQLiteDatabase
from kanban.transitions import Actor
from tests.support.db import FakeClock, open_sqlite

MAX_STATEMENTS = 8  # the bound for one claim + complete, audit rows included


class TracedDatabase(SQLiteDatabase):
    """Every statement its connections run, as SQLite reports them."""

    seen: list[str]

    def connect(self) -> sqlite3.Connection:
        raw = super().connect()
        raw.set_trace_callback(self.seen.append)
        return raw


def cycle_statements(tmp_path: Path, *, dependents: int) -> list[str]:
    open_sqlite(tmp_path / "kanban.db").dispose()
    db = TracedDatabase(tmp_path / "kanban.db")
    db.seen = []
    clock = FakeClock()
    kb = Kanban(db, clock=clock)
    card = kb.add_card(NewCard("work"))
    for n in range(dependents):
        kb.add_card(NewCard(f"after {n}", depends_on=[card.id]))
    db.seen.clear()
    with db.write() as conn:
        (claim,) = claims.claim(conn, 1, now=clock.now, lease_s=30)
    with db.write() as conn:
        transitions.complete(conn, claim.card_id, "done", now=clock.now,
                             actor=Actor("worker", claim.claim_token))
    seen = [s for s in db.seen if not s.startswith("--")]
    assert kb.card(card.id).status == "done"
    db.dispose()
    return [s for n, s in enumerate(seen) if n == 0 or seen[n - 1] != s]


def counted(statements: list[str]) -> list[str]:
    """All but the transaction brackets (BEGIN IMMEDIATE, COMMIT)."""
    return [s for s in statements if s.split()[0].upper() not in {"BEGIN", "COMMIT"}]


def test_claim_and_complete_take_at_most_eight_statements(tmp_path: Path) -> None:
    statements = cycle_statements(tmp_path, dependents=0)
    work = counted(statements)
    assert len(work) <= MAX_STATEMENTS, "\n".join(work)
    assert len(statements) - len(work) == 4  # two transactions, nothing else


def test_dependents_cost_one_statement_however_many(tmp_path: Path) -> None:
    """Dependents waiting in todo add one statement (their promotion) whatever their
    number, plus one `promoted` event each (the dependents' audit rows)."""
    alone = counted(cycle_statements(tmp_path / "a", dependents=0))
    one = counted(cycle_statements(tmp_path / "b", dependents=1))
    three = counted(cycle_statements(tmp_path / "c", dependents=3))
    assert len(one) - len(alone) == 1 + 1
    assert len(three) - len(alone) == 1 + 3
