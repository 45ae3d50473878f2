"""Review gates: a gated card's completion is checked before it counts.

A card may carry one gate: `verify:CMD` (a command run in its workspace by its worker; exit 0
passes), `reviewer:PROFILE` (a reviewer card whose agent approves or requests changes) or
`human` (`kanban approve` / `kanban reject`). A worker's completion moves a gated card to
`review`; a pass makes it `done` and promotes its dependents; changes send it back to `ready`
with the feedback for the next attempt, until `max_reviews` rounds asked for changes (then
`failed`, or `blocked` for a human gate). Callers hold a write transaction.
"""

from __future__ import annotations

from datetime import datetime

from kanban import comments, reactions
from kanban import validation as v
from kanban.card_types import HUMAN, REVIEWER, REVIEWER_ROLE, USER, VERIFY, Actor, Gate, Verdict
from kanban.cards import NewCard, add_card, get_card
from kanban.errors import InvalidTransition, ValidationError
from kanban.records import CardRecord
from kanban.state.store import Conn
from kanban.states import Action, CardStatus, Outcome

MAX_FEEDBACK = v.MAX_COMMENT


def gate_spec(*, verify: str | None, reviewer: str | None, human: bool) -> str | None:
    """The one gate that `kanban add --verify/--reviewer/--human` asks for, as stored."""
    chosen = [g for g in (verify and f"{VERIFY}:{verify}", reviewer and f"{REVIEWER}:{reviewer}",
                          human and HUMAN) if g]
    if len(chosen) > 1:
        raise ValidationError("a card takes one review gate: --verify, --reviewer or --human")
    return Gate.parse(chosen[0]).spec() if chosen else None


def submit(conn: Conn, card_id: int, summary: str, *, now: datetime, actor: Actor,
           verdict: Verdict | None = None) -> CardRecord:
    """A gated card's worker completed: running → review. A verify gate's verdict (the
    worker ran the command under its lease) is applied at once; a reviewer gate gets its
    reviewer card; a human gate waits for `kanban approve` or `kanban reject`."""
    v.text(summary, "summary", v.MAX_SUMMARY)
    card = get_card(conn, card_id)
    gate = Gate.of(card)
    if gate is None:
        raise InvalidTransition(f"#{card_id} has no review gate")
    reactions.move(conn, card_id, Action.SUBMIT, CardStatus.REVIEW, actor=actor, now=now,
                   outcome=Outcome.COMPLETED, kind="review_requested",
                   values={"result": summary, "error": None}, gate=gate.spec())
    if gate.kind == VERIFY and verdict is not None:
        who = Actor(f"verify:#{card_id}")
        if verdict.passed:
            return approve(conn, card_id, now=now, actor=who, note=verdict.feedback or None)
        return request_changes(conn, card_id, verdict.feedback, now=now, actor=who)
    if gate.kind == REVIEWER:
        _add_reviewer_card(conn, card, gate.arg, summary, now)
    return get_card(conn, card_id)


def _add_reviewer_card(conn: Conn, card: CardRecord, profile: str, summary: str,
                       now: datetime) -> CardRecord:
    """A card for the reviewer profile's agent: it shares the reviewed card's workspace."""
    goal = (f"Review the work on card #{card.id} ({card.title}). Read its result below and "
            "the files in your workspace (the same workspace). If the work meets the goal, "
            "call kanban_approve; otherwise call kanban_request_changes with concrete feedback "
            "for the next attempt.")
    context = (f"Goal of #{card.id}: {card.goal}\n\nResult of attempt {card.attempt}:\n"
               f"{summary}")[:v.MAX_CONTEXT]
    return add_card(conn, NewCard(
        title=f"Review #{card.id}: {card.title}"[:v.MAX_TITLE], goal=goal, context=context,
        board=card.board, priority=card.priority, profile=profile, parent_id=card.id,
        created_by=f"review:#{card.id}", role=REVIEWER_ROLE, subject_id=card.id,
        workspace="parent",
    ), now)


def approve(conn: Conn, card_id: int, *, now: datetime, actor: Actor = USER,
            note: str | None = None, board: str | None = None) -> CardRecord:
    """The gate passed: review → done; its dependents may start."""
    if note is not None:
        note = note[:MAX_FEEDBACK]
    reactions.move(conn, card_id, Action.PASS, CardStatus.DONE, actor=Actor(actor.name),
                   now=now, board=board, kind="review_passed",
                   values={"finished_at": now, "feedback": None}, note=note)
    if note:
        comments.add_comment(conn, card_id, f"approved: {note}", author=actor.name, now=now)
    reactions.done(conn, card_id, now=now, actor=actor.name, promoter=actor.name)
    return get_card(conn, card_id)


def request_changes(conn: Conn, card_id: int, feedback: str, *, now: datetime,
                    actor: Actor = USER, board: str | None = None) -> CardRecord:
    """The gate asked for changes: another attempt with the feedback, or, out of rounds,
    failed (blocked for a person when the gate is human)."""
    feedback = feedback.strip()[:MAX_FEEDBACK] or "changes requested (no feedback given)"
    card = get_card(conn, card_id, board=board)
    rounds = card.reviews + 1
    base = {"feedback": feedback, "reviews": rounds}
    if rounds >= card.max_reviews:
        human = card.review == HUMAN
        to = CardStatus.BLOCKED if human else CardStatus.FAILED
        error = (f"review asked for changes {rounds} times (max_reviews {card.max_reviews}): "
                 f"{feedback}")[:v.MAX_COMMENT]
        values = {**base, "error": error, **({} if human else {"finished_at": now})}
        reactions.move(conn, card_id, Action.CHANGES, to, actor=Actor(actor.name), now=now,
                       board=board, kind="review_rejected", values=values, feedback=feedback,
                       reviews=rounds)
        if not human:  # as any failure: its dependents follow their policy, naming it
            reactions.dependents_of_ended(conn, card_id, f"failed its review: {feedback}",
                                          now=now, actor=actor.name)
    else:
        # Each round gets the card's whole attempt budget again (crashes are counted apart),
        # and a fresh conversation that opens with the feedback (its files stay).
        reactions.move(conn, card_id, Action.CHANGES, CardStatus.READY, actor=Actor(actor.name),
                       now=now, board=board, kind="changes_requested",
                       values={**base, "run_after": now, "retry_base": card.attempt,
                               "resume_base": card.attempt},
                       feedback=feedback, reviews=rounds)
    comments.add_comment(conn, card_id, f"changes requested: {feedback}", author=actor.name,
                         now=now)
    return get_card(conn, card_id)


def reject(conn: Conn, card_id: int, feedback: str, *, now: datetime, actor: Actor = USER,
           board: str | None = None) -> CardRecord:
    """`kanban reject`: a person asks for changes (feedback required)."""
    v.text(feedback, "feedback", v.MAX_COMMENT, required=True)
    return request_changes(conn, card_id, feedback, now=now, actor=actor, board=board)


def in_review(conn: Conn, card_id: int) -> bool:
    row = conn.one("SELECT status FROM card WHERE id = :id", {"id": card_id})
    return row is not None and row[0] == CardStatus.REVIEW
