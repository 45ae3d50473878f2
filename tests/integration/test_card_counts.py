"""The column counts kept by triggers (card_count) always equal a count of the cards."""

from __future__ import annotations

import pytest

from kanban.cards import NewCard
from kanban.edits import CardEdit
from kanban.queries import status_counts
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import CardStatus
from tests.support.db import STORES, put_card_in

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def counted(db: Database) -> dict[tuple[str, str, str], int]:
    with db.read() as conn:
        return {(board, profile, status): int(n) for board, profile, status, n in conn.all(
            "SELECT board, profile, status, count(*) FROM card WHERE archived_at IS NULL "
            "GROUP BY board, profile, status")}


def kept(db: Database) -> dict[tuple[str, str, str], int]:
    with db.read() as conn:
        return {(board, profile, status): int(n) for board, profile, status, n in conn.all(
            "SELECT board, profile, status, n FROM card_count WHERE n != 0")}


def test_counts_follow_every_kind_of_change(kb: Kanban, db: Database) -> None:
    kb.create_board("other")
    first = (CardStatus.RUNNING, CardStatus.FAILED, CardStatus.DONE)  # each claims the only
    cards = {s: put_card_in(kb, s)                                   # ready card
             for s in (*first, *(s for s in CardStatus if s not in first))}
    assert kept(db) == counted(db)
    done = cards[CardStatus.DONE]
    kb.archive(done.id)  # leaves its column
    assert kept(db) == counted(db)
    kb.retry(done.id)  # back, unarchived, in another column
    assert kept(db) == counted(db)
    kb.edit(cards[CardStatus.READY].id, CardEdit(profile="coder"))  # moves between profiles
    assert kept(db) == counted(db)
    blocked = kb.add_card(NewCard("blocked later", board="other"))
    kb.cancel(blocked.id)
    with db.write() as conn:
        conn.run("DELETE FROM card WHERE id = :id", {"id": blocked.id})
    assert kept(db) == counted(db)
    with db.read() as conn:
        shown = status_counts(conn, "default")
    expected: dict[str, int] = {}
    for (board, _profile, status), n in counted(db).items():
        if board == "default":
            expected[status] = expected.get(status, 0) + n
    assert {s: n for s, n in shown.items() if n} == expected
