"""Limits on what a card holds: refused before anything is written."""

from __future__ import annotations

from typing import Any

import pytest

from kanban import validation as v
from kanban.cards import NewCard
from kanban.errors import BoardNotFound, ValidationError
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import event_count, put_card_in

BAD_CARDS: dict[str, tuple[dict[str, Any], str]] = {
    "empty title": ({"title": ""}, "title must not be empty"),
    "blank title": ({"title": "   "}, "title must not be empty"),
    "oversize title": ({"title": "x" * (v.MAX_TITLE + 1)}, f"title is {v.MAX_TITLE + 1} "
                                                          "characters"),
    "two-line title": ({"title": "one\ntwo"}, "title must be one line"),
    "control in title": ({"title": "bell\x07"}, "title contains control characters"),
    "NUL in goal": ({"goal": "a\x00b"}, "goal contains control characters"),
    "oversize goal": ({"goal": "g" * (v.MAX_GOAL + 1)}, "goal is 20,001 characters"),
    "oversize context": ({"context": "c" * (v.MAX_CONTEXT + 1)}, "context is 100,001"),
    "escape in context": ({"context": "\x1b[31mred"}, "context contains control"),
    "priority too high": ({"priority": 1_000_001}, "priority must be between"),
    "priority too low": ({"priority": -1_000_001}, "priority must be between"),
    "no attempts": ({"max_attempts": 0}, "max attempts must be between 1 and 100"),
    "too many attempts": ({"max_attempts": 101}, "max attempts must be between"),
    "tiny timeout": ({"timeout_s": 0.5}, "timeout must be between"),
    "huge timeout": ({"timeout_s": 8 * 24 * 3600.0}, "timeout must be between"),
    "NaN timeout": ({"timeout_s": float("nan")}, "timeout must be between"),
    "bad profile": ({"profile": "no spaces"}, "invalid profile name"),
}


@pytest.mark.parametrize("case", list(BAD_CARDS))
def test_bad_cards_are_refused_and_nothing_is_written(kb: Kanban, db: Database,
                                                      case: str) -> None:
    fields, message = BAD_CARDS[case]
    events = event_count(db)
    with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
        kb.add_card(NewCard(**{"title": "a title", **fields}))
    assert kb.list_cards() == [] and event_count(db) == events


def test_limits_are_inclusive(kb: Kanban) -> None:
    card = kb.add_card(NewCard(
        "x" * v.MAX_TITLE, goal="g" * v.MAX_GOAL, context="c\tt\n" * (v.MAX_CONTEXT // 4),
        priority=v.PRIORITY_RANGE[1], max_attempts=100, timeout_s=1.0,
    ))
    assert len(card.title) == v.MAX_TITLE and card.priority == 1_000_000


def test_title_is_stripped(kb: Kanban) -> None:
    assert kb.add_card(NewCard("  tidy up  ")).title == "tidy up"


def test_unknown_board_is_refused(kb: Kanban) -> None:
    with pytest.raises(BoardNotFound, match="no board named 'nowhere'"):
        kb.add_card(NewCard("task", board="nowhere"))


@pytest.mark.parametrize("name", ["", "-leading-dash", "has space", "a/b", "x" * 65])
def test_bad_board_names_are_refused(kb: Kanban, name: str) -> None:
    with pytest.raises(ValidationError, match="invalid board name"):
        kb.create_board(name)


def test_board_creation_is_idempotent(kb: Kanban) -> None:
    assert kb.create_board("team.a_1") is True
    assert kb.create_board("team.a_1") is False
    assert [b["name"] for b in kb.boards()] == ["default", "team.a_1"]


@pytest.mark.parametrize(("body", "message"), [
    ("", "comment must not be empty"),
    ("  \n", "comment must not be empty"),
    ("x" * (v.MAX_COMMENT + 1), "comment is 20,001 characters"),
    ("\x00", "comment contains control characters"),
])
def test_bad_comments_are_refused(kb: Kanban, db: Database, body: str, message: str) -> None:
    card = kb.add_card(NewCard("task"))
    events = event_count(db)
    with pytest.raises(ValidationError, match=message):
        kb.comment(card.id, body)
    assert event_count(db) == events and kb.detail(card.id).comments == ()


def test_block_needs_a_reason_and_complete_a_clean_summary(kb: Kanban) -> None:
    card = kb.add_card(NewCard("task"))
    with pytest.raises(ValidationError, match="reason must not be empty"):
        kb.block(card.id, " ")
    with pytest.raises(ValidationError, match="summary contains control characters"):
        kb.complete(card.id, "done\x00")
    with pytest.raises(ValidationError, match="summary is 100,001 characters"):
        kb.complete(card.id, "s" * (v.MAX_SUMMARY + 1))
    assert kb.card(card.id).status == "ready"


def test_an_unblock_note_is_validated_like_a_comment(kb: Kanban) -> None:
    card = put_card_in(kb, "blocked")
    with pytest.raises(ValidationError, match="comment contains control characters"):
        kb.unblock(card.id, "go\x00")
    assert kb.card(card.id).status == "blocked"
