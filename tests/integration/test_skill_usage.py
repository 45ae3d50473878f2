"""Skill uses and decisions (migration 16) read and written the same on both stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kanban import skill_usage
from kanban.errors import ValidationError
from kanban.state.store import Database
from tests.support.db import STORES

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_uses_are_counted_by_kind_with_the_last_one(db: Database) -> None:
    with db.write() as conn:
        skill_usage.record(conn, ["a", "b"], "given", now=T0, card_id=1, profile="p")
        skill_usage.record(conn, ["a"], "view", now=T0 + timedelta(hours=1), card_id=1)
        skill_usage.record(conn, ["a"], "patch", now=T0 + timedelta(hours=2), card_id=2)
        skill_usage.record(conn, ["a"], "restore", now=T0 + timedelta(hours=3))
    with db.read() as conn:
        used = skill_usage.usage(conn)
        one = skill_usage.of(conn, "a")
    a = used["a"]
    assert (a.views, a.given, a.patches, a.uses) == (1, 1, 1, 2)
    assert a.last_used == T0 + timedelta(hours=3) == one.last_used
    assert used["b"].last_used == T0 and used["b"].shown_state() == "active"


def test_pin_and_state_are_kept_apart(db: Database) -> None:
    with db.write() as conn:
        skill_usage.set_state(conn, "a", pinned=True, now=T0)
        skill_usage.set_state(conn, "a", state="stale", now=T0)
    with db.read() as conn:
        a = skill_usage.of(conn, "a")
    assert (a.pinned, a.state, a.shown_state()) == (True, "stale", "pinned")
    with db.write() as conn:
        skill_usage.set_state(conn, "a", pinned=False, now=T0)
        with pytest.raises(ValidationError):
            skill_usage.set_state(conn, "a", state="deleted", now=T0)
    with db.read() as conn:
        assert skill_usage.usage(conn)["a"].shown_state() == "stale"


def test_skills_named_by_unfinished_cards_are_found(db: Database) -> None:
    from kanban import cards
    from kanban.cards import NewCard

    with db.write() as conn:
        cards.create_board(conn, "default", T0)
        cards.add_card(conn, NewCard("waits", skills=("a", "b")), T0)
        done = cards.add_card(conn, NewCard("over", skills=("c",)), T0).id
        conn.execute("UPDATE card SET status = 'done' WHERE id = :id", {"id": done})
    with db.read() as conn:
        assert skill_usage.named_by_board(conn) == {"a", "b"}
