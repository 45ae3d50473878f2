"""Triage: proposed graphs, the decomposer card, decomposition and the roll-up."""

from __future__ import annotations

import pytest

from kanban import triage
from kanban.cards import NewCard
from kanban.errors import InvalidTransition, ValidationError
from kanban.service import Kanban
from kanban.state.config import Config, Profile
from kanban.state.errors import ConfigError
from kanban.states import CardStatus as S
from kanban.transitions import Actor
from tests.support.db import STORES, events_of

PROFILES = ("default", "bash")

BOTH = pytest.mark.parametrize("store", STORES, indirect=True)


def graph(*cards: dict) -> triage.Graph:
    return triage.parse_graph(list(cards), PROFILES, max_cards=5)


def test_graphs_point_back_only_and_name_known_profiles() -> None:
    g = graph({"title": "a"}, {"title": "b", "profile": "bash", "depends_on": [1, 1]})
    assert g.cards[1] == triage.Proposed("b", profile="bash", depends_on=(1,))
    assert g.lines() == ["1. [default] a", "2. [bash] b after 1"]
    bad = [
        ([], "non-empty"),
        ([{"title": "a", "depends_on": [1]}], "only on cards listed before"),
        ([{"title": "a"}, {"title": "b", "depends_on": [3]}], "only on cards listed before"),
        ([{"title": "a", "profile": "nobody"}], "unknown profile 'nobody'"),
        ([{"goal": "no title"}], "needs a title"),
        ([{"title": "a", "depends_on": ["1"]}], "list of card numbers"),
        ([{"title": str(n)} for n in range(6)], "at most 5"),
        (["a"], "must be an object"),
    ]
    for cards, message in bad:
        with pytest.raises(ValidationError, match=message):
            triage.parse_graph(cards, PROFILES, max_cards=5)


def test_the_decomposer_profile_is_named_or_found_by_role() -> None:
    config = Config(profiles={"default": Profile(), "split": Profile(name="split",
                                                                     role="decomposer")})
    assert triage.decomposer_profile(config) == "split"
    assert triage.decomposer_profile(config, "default") == "default"
    with pytest.raises(ConfigError, match="no decomposer profile"):
        triage.decomposer_profile(Config())
    assert "split" not in triage.catalogue(config)


@BOTH
def test_a_triaged_card_waits_for_the_graph_it_was_split_into(kb: Kanban) -> None:
    added = kb.triage_new(NewCard("launch", goal="ship v2"), decomposer="bash",
                          catalog="Profiles: ...")
    idea = added.card
    assert idea.status == S.TRIAGE
    (decomposer,) = [c for c in kb.list_cards() if c.role == "decomposer"]
    assert (decomposer.subject_id, decomposer.profile, decomposer.status) == (
        idea.id, "bash", S.READY)
    assert "Idea: launch\nGoal: ship v2" in decomposer.context
    with kb.db.write() as conn:
        made = triage.decompose(conn, idea.id, graph({"title": "a"}, {"title": "b",
                                                                     "depends_on": [1]}),
                                now=kb.clock(), actor=Actor("card:#2"))
    a, b = made
    assert (a.status, b.status) == (S.READY, S.TODO)
    after = kb.card(idea.id)
    assert (after.status, after.role) == (S.WAITING, "triaged")
    moves = [e for e in events_of(kb.db, idea.id) if e["kind"] == "decomposed"]
    assert moves[0]["data"] == {"from": "triage", "to": "waiting", "children": [a.id, b.id]}
    kb.complete(a.id, "facts")
    assert kb.card(idea.id).status == S.WAITING
    with kb.db.read() as conn:
        early = triage.unfinished(triage.triaged_children(conn, idea.id))
    assert early is not None and f"#{b.id} b is ready" in early
    kb.complete(b.id, "post")
    assert kb.card(idea.id).status == S.READY  # its worker rolls the results up
    with kb.db.read() as conn:
        children = triage.triaged_children(conn, idea.id)
    assert triage.unfinished(children) is None
    assert triage.rollup(children) == (f"Done through 2 cards:\n- #{a.id} a (done): facts\n"
                                       f"- #{b.id} b (done): post")


@BOTH
def test_only_unstarted_cards_are_triaged_and_never_with_a_verify_gate(kb: Kanban) -> None:
    gated = kb.add_card(NewCard("tested", review="verify:pytest"))
    with pytest.raises(ValidationError, match="verify gate"):
        kb.triage(gated.id, decomposer="default", catalog="")
    with pytest.raises(ValidationError, match="children"):
        kb.triage_new(NewCard("x", review="verify:true"), decomposer="default", catalog="")
    done = kb.add_card(NewCard("done"))
    kb.complete(done.id, "ok")
    with pytest.raises(InvalidTransition, match="cannot triage"):
        kb.triage(done.id, decomposer="default", catalog="")


@BOTH
def test_a_cancelled_decomposer_leaves_word_and_the_card_can_be_triaged_again(
        kb: Kanban) -> None:
    idea = kb.triage_new(NewCard("launch"), decomposer="bash", catalog="").card
    (first,) = [c for c in kb.list_cards() if c.role == "decomposer"]
    kb.cancel(first.id, reason="wrong profile")
    (note,) = kb.detail(idea.id).comments
    assert note.body.startswith(f"decomposer card #{first.id} cancelled without a decision: "
                                "wrong profile; try again with `kanban triage`")
    again = kb.triage(idea.id, decomposer="default", catalog="")
    assert again.status == S.TRIAGE
    assert [c.profile for c in kb.list_cards() if c.role == "decomposer"] == ["bash",
                                                                              "default"]


@BOTH
def test_a_failed_child_leaves_the_roll_up_to_a_person(kb: Kanban) -> None:
    idea = kb.triage_new(NewCard("launch"), decomposer="bash", catalog="").card
    with kb.db.write() as conn:
        (child,) = triage.decompose(conn, idea.id, graph({"title": "a"}), now=kb.clock(),
                                    actor=Actor("card:#2"))
    kb.cancel(child.id, reason="not needed after all")
    assert kb.card(idea.id).status == S.READY  # settled: its worker says what is left
    with kb.db.read() as conn:
        why = triage.unfinished(triage.triaged_children(conn, idea.id))
    assert why == (f"not every card it was split into is done: #{child.id} a is cancelled "
                   "(not needed after all). Finish them (retry, unblock), then unblock this "
                   "card.")
