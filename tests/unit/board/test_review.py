"""Review gates: submission, pass, changes, the bound on rounds, reviewer cards."""

from __future__ import annotations

import pytest

from kanban.cards import NewCard
from kanban.errors import InvalidTransition, ValidationError
from kanban.review import Gate, Verdict, gate_spec
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.states import CardStatus as S
from tests.support.db import (
    STORES,
    card_row,
    claim_one,
    events_of,
    fail,
    status_events,
    worker,
)

BOTH = pytest.mark.parametrize("store", STORES, indirect=True)


def submit(kb: Kanban, card_id: int, verdict: Verdict | None = None) -> str:
    """A worker claims the card and completes it; returns the card's status after."""
    claim = claim_one(kb, card_id)
    return kb.complete(card_id, "the work", actor=worker(claim), gated=None,
                       verdict=verdict).status


def test_gate_specs_parse_and_bad_ones_are_refused() -> None:
    assert Gate.parse("verify:pytest -q") == Gate("verify", "pytest -q")
    assert Gate.parse("reviewer:critic") == Gate("reviewer", "critic")
    assert Gate.parse("human") == Gate("human")
    for bad in ("verify:", "verify:  ", "reviewer:", "reviewer:a b", "human:x", "robot"):
        with pytest.raises(ValidationError):
            Gate.parse(bad)
    assert gate_spec(verify=None, reviewer=None, human=False) is None
    with pytest.raises(ValidationError, match="one review gate"):
        gate_spec(verify="true", reviewer=None, human=True)


@BOTH
def test_a_gated_card_goes_to_review_and_its_dependent_waits(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("gated", review="human"))
    dependent = kb.add_card(NewCard("after", depends_on=[card.id]))
    assert submit(kb, card.id) == S.REVIEW
    assert kb.card(dependent.id).status == S.TODO
    assert kb.claim(5, lease_s=30) == []  # nothing runs while the gate decides
    row = card_row(db, card.id)
    assert row["result"] == "the work" and row["claim_token"] is None
    moves = [(e["kind"], e["data"]["from"], e["data"]["to"]) for e in status_events(db, card.id)]
    assert moves[-1] == ("review_requested", "running", "review")
    kb.approve_review(card.id, note="fine")
    assert kb.card(card.id).status == S.DONE
    assert kb.card(dependent.id).status == S.READY


@BOTH
def test_a_card_without_a_gate_is_done_at_once(kb: Kanban) -> None:
    card = kb.add_card(NewCard("plain"))
    assert submit(kb, card.id) == S.DONE


@BOTH
def test_changes_send_the_card_back_with_feedback_then_the_bound_fails_it(
        kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("gated", review="verify:pytest", max_reviews=2,
                               max_attempts=1))
    assert submit(kb, card.id, Verdict(False, "1 failed")) == S.READY
    after = kb.card(card.id)
    assert (after.reviews, after.feedback) == (1, "1 failed")
    # a review round does not spend the crash budget: max_attempts=1 still allows this claim
    assert submit(kb, card.id, Verdict(False, "2 failed")) == S.FAILED
    failed = kb.card(card.id)
    assert failed.reviews == 2 and "2 failed" in (failed.error or "")
    kinds = [e["kind"] for e in events_of(db, card.id)]
    assert kinds.count("review_requested") == 2 and kinds[-2:] == ["review_rejected",
                                                                     "commented"]


@BOTH
def test_a_verify_pass_clears_the_feedback(kb: Kanban) -> None:
    card = kb.add_card(NewCard("gated", review="verify:true"))
    submit(kb, card.id, Verdict(False, "no"))
    assert submit(kb, card.id, Verdict(True, "verify `true` passed")) == S.DONE
    assert kb.card(card.id).feedback is None


@BOTH
def test_a_human_gate_out_of_rounds_blocks_for_a_person(kb: Kanban) -> None:
    card = kb.add_card(NewCard("gated", review="human", max_reviews=1))
    submit(kb, card.id)
    assert kb.reject(card.id, "not yet").status == S.BLOCKED
    assert kb.unblock(card.id, "try once more").status == S.READY


@BOTH
def test_a_reviewer_gate_adds_a_reviewer_card_sharing_the_workspace(kb: Kanban) -> None:
    card = kb.add_card(NewCard("gated", goal="write it", review="reviewer:critic"))
    submit(kb, card.id)
    (review_card,) = [c for c in kb.list_cards() if c.role == "reviewer"]
    assert (review_card.subject_id, review_card.parent_id) == (card.id, card.id)
    assert review_card.profile == "critic" and review_card.workspace == "parent"
    assert review_card.status == S.READY and "the work" in review_card.context


@BOTH
def test_only_cards_in_review_are_approved_or_rejected(kb: Kanban) -> None:
    card = kb.add_card(NewCard("plain"))
    with pytest.raises(InvalidTransition, match="only cards in review"):
        kb.approve_review(card.id)
    with pytest.raises(InvalidTransition, match="only cards in review"):
        kb.reject(card.id, "no")
    kb.cancel(card.id)
    gated = kb.add_card(NewCard("gated", review="human"))
    submit(kb, gated.id)
    with pytest.raises(ValidationError):
        kb.reject(gated.id, "  ")
    assert kb.card(gated.id).status == S.REVIEW


@BOTH
def test_a_worker_that_forgets_its_card_is_gated_still_goes_to_review(kb: Kanban) -> None:
    card = kb.add_card(NewCard("gated", review="human"))
    claim = claim_one(kb, card.id)
    assert kb.complete(card.id, "done?", actor=worker(claim)).status == S.REVIEW


@BOTH
def test_a_reviewer_that_fails_leaves_word_on_the_card_it_reviews(kb: Kanban) -> None:
    card = kb.add_card(NewCard("gated", review="reviewer:default"))
    submit(kb, card.id)
    (reviewer,) = [c for c in kb.list_cards() if c.role == "reviewer"]
    claim_one(kb, reviewer.id)
    fail(kb, reviewer.id, error="401 unauthorised")
    (note,) = kb.detail(card.id).comments
    assert note.body == (f"reviewer card #{reviewer.id} failed without a decision: 401 "
                         "unauthorised; decide with `kanban approve` or `kanban reject`")
    assert kb.card(card.id).status == S.REVIEW
    assert kb.approve(card.id).status == S.DONE


@BOTH
def test_a_card_not_in_review_is_refused_in_plain_words(kb: Kanban) -> None:
    card = kb.add_card(NewCard("not gated yet", review="human"))
    with pytest.raises(InvalidTransition, match=r"^cannot send back #\d+: it is ready \(only "
                       r"cards in review can be sent back\)$"):
        kb.reject(card.id, "more")
    with pytest.raises(InvalidTransition, match=r"^cannot approve #\d+: it is ready \("):
        kb.approve_review(card.id)
