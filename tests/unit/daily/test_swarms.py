"""Swarms: the graph, made in one transaction, and found again from its synthesizer."""

from __future__ import annotations

import pytest

from kanban.errors import ValidationError
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.swarms import NewSwarm
from tests.support.db import STORES

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def deps(db: Database, card_id: int) -> list[int]:
    with db.read() as conn:
        return conn.column("SELECT depends_on_id FROM dependency WHERE card_id = :id "
                           "ORDER BY depends_on_id", {"id": card_id})


def test_given_parts_make_one_worker_each(kb: Kanban, db: Database) -> None:
    s = kb.create_swarm(NewSwarm("Review the release", parts=("the docs", "the code"),
                                 verifier="default", synthesizer="default"))
    assert s.planner is None and len(s.workers) == 2
    workers = [kb.card(w) for w in s.workers]
    assert [w.status for w in workers] == ["ready", "ready"]
    assert "Your part:\nthe docs" in workers[0].goal and workers[1].title.endswith("the code")
    assert deps(db, s.verifier) == list(s.workers)
    assert deps(db, s.synthesizer) == [*s.workers, s.verifier]
    assert kb.card(s.verifier).status == kb.card(s.synthesizer).status == "todo"
    assert kb.swarm(s.synthesizer) == s


def test_without_parts_a_planner_splits_the_goal_first(kb: Kanban, db: Database) -> None:
    s = kb.create_swarm(NewSwarm("Compare journal modes\nWAL, DELETE and TRUNCATE",
                                 workers=3, skills=("tone",)))
    assert s.planner is not None and len(s.workers) == 3
    planner = kb.card(s.planner)
    assert planner.status == "ready" and "exactly 3 independent parts" in planner.goal
    assert planner.title == "Plan: Compare journal modes"
    for i, w in enumerate(s.workers, start=1):
        card = kb.card(w)
        assert deps(db, w) == [s.planner] and card.status == "todo"
        assert f"do part {i} of it" in card.goal and card.skill_names == ("tone",)
    assert kb.swarm(s.synthesizer) == s


def test_the_graph_is_all_or_nothing(kb: Kanban) -> None:
    with pytest.raises(ValidationError, match="invalid profile"):
        kb.create_swarm(NewSwarm("goal", workers=2, synthesizer="not a profile!"))
    assert kb.list_cards() == []


def test_a_key_returns_the_unfinished_swarm(kb: Kanban) -> None:
    first = kb.create_swarm(NewSwarm("goal", workers=2, key="weekly"))
    again = kb.create_swarm(NewSwarm("goal", workers=2, key="weekly"))
    assert first.created and not again.created
    assert again.cards == first.cards and len(kb.list_cards()) == len(first.cards)


@pytest.mark.parametrize(("new", "message"), [
    (NewSwarm("goal", workers=3, parts=("a", "b")), "2 parts given for 3 workers"),
    (NewSwarm("goal", workers=0), "1 to 32 workers"),
    (NewSwarm("goal", workers=33), "1 to 32 workers"),
    (NewSwarm("   ", workers=2), "goal must not be empty"),
    (NewSwarm("goal", parts=("a", " ")), "part must not be empty"),
])
def test_bad_swarms_are_refused(kb: Kanban, new: NewSwarm, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        kb.create_swarm(new)
    assert kb.list_cards() == []


def test_only_a_synthesizer_names_a_swarm(kb: Kanban) -> None:
    s = kb.create_swarm(NewSwarm("goal", workers=1))
    with pytest.raises(ValidationError, match="not a swarm's synthesizer"):
        kb.swarm(s.verifier)


def test_the_verifier_may_carry_a_review_gate(kb: Kanban) -> None:
    s = kb.create_swarm(NewSwarm("goal", workers=2, review="human"))
    assert kb.card(s.verifier).review == "human"
    assert all(kb.card(w).review is None for w in s.workers)
    assert kb.card(s.synthesizer).review is None
    with pytest.raises(ValidationError, match="invalid review gate"):
        kb.create_swarm(NewSwarm("goal", workers=2, review="lgtm"))
    with kb.db.read() as conn:  # refused before anything was made
        assert conn.scalar("SELECT count(*) FROM card") == len(s.cards)
