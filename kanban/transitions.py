"""Every change of a card's state: one function each, one event each.

Callers hold a write transaction. A worker passes its claim token: the change is
one fenced `UPDATE … WHERE claim_token = :token AND status = 'running'`, and a
stale token raises LeaseLost instead of changing anything. These run on the
driver connection: they are the hot path of every worker.

Each is a move of the state machine (kanban.machine) followed by its reactions
(kanban.reactions); `Actor`, `USER` and `assert_lease` are re-exported from below.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from kanban import reactions, review
from kanban import validation as v
from kanban.card_types import USER as USER
from kanban.card_types import Actor as Actor
from kanban.card_types import Verdict
from kanban.cards import card_with_key, get_card
from kanban.children import Delegation, unsettled
from kanban.comments import UNBLOCKED, add_comment
from kanban.dependencies import status_after_dependencies
from kanban.errors import CardNotFound, InvalidTransition, LeaseLost
from kanban.events import record_event
from kanban.machine import assert_lease as assert_lease
from kanban.records import CardRecord
from kanban.state.store import Conn
from kanban.states import ALLOWED, Action, CardStatus, Outcome, check
from kanban.waiting import resume_if_settled

BACKOFF_BASE_S = 2.0
BACKOFF_CAP_S = 300.0


def retry_delay(attempt: int, *, rng: random.Random | None = None) -> float:
    """Jittered exponential backoff: base·2^(attempt-1), capped, scaled by [0.5, 1)."""
    raw = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** max(0, attempt - 1))
    return raw * (0.5 + 0.5 * (rng or random).random())


def complete(conn: Conn, card_id: int, summary: str, *, now: datetime,
             actor: Actor = USER, board: str | None = None, implicit: bool = False,
             gated: bool | None = None, verdict: Verdict | None = None) -> None:
    """The hot end of every card: three statements, one more to promote dependents waiting
    in todo; no re-read (callers that show the card read it themselves). A worker's gated
    card goes to review instead (`gated`: whether it has a gate, when the caller knows; a
    person completing a card by hand has decided)."""
    v.text(summary, "summary", v.MAX_SUMMARY)
    worker = actor.claim_token is not None
    if worker and gated:
        return _submit(conn, card_id, summary, now=now, actor=actor, verdict=verdict)
    try:  # a worker not known to be ungated: its update holds only for an ungated card
        moved = reactions.move(conn, card_id, Action.COMPLETE, CardStatus.DONE, actor=actor,
                               now=now, board=board, outcome=Outcome.COMPLETED, values={
                                   "result": summary, "error": None, "finished_at": now},
                               guard="review IS NULL" if worker and gated is None else None,
                               implicit=implicit)
    except LeaseLost:
        if not (worker and gated is None and _gated(conn, card_id)):
            raise
        return _submit(conn, card_id, summary, now=now, actor=actor, verdict=verdict)
    reactions.done(conn, card_id, now=now, actor=actor.name, moved=moved)


def _gated(conn: Conn, card_id: int) -> bool:
    return conn.scalar("SELECT review FROM card WHERE id = :id", {"id": card_id}) is not None


def _submit(conn: Conn, card_id: int, summary: str, *, now: datetime, actor: Actor,
            verdict: Verdict | None) -> None:
    review.submit(conn, card_id, summary, now=now, actor=actor, verdict=verdict)


def block(conn: Conn, card_id: int, reason: str, *, now: datetime, actor: Actor = USER,
          board: str | None = None) -> CardRecord:
    v.text(reason, "reason", v.MAX_COMMENT, required=True)
    values: dict[str, Any] = {"error": reason}
    row = conn.one("SELECT status, retry_base FROM card WHERE id = :id", {"id": card_id})
    if row is not None and row[0] == CardStatus.RUNNING:
        # A run that hands its card to a person (an approval, a question) spends no attempt,
        # as a delegation spends none: attempts count runs that failed, never `2/1`.
        values["retry_base"] = int(row[1]) + 1
    reactions.move(conn, card_id, Action.BLOCK, CardStatus.BLOCKED, actor=actor, now=now,
                   board=board, outcome=Outcome.BLOCKED, values=values, reason=reason)
    add_comment(conn, card_id, f"blocked: {reason}", author=actor.name, now=now)
    return get_card(conn, card_id)


def unblock(conn: Conn, card_id: int, note: str | None, *, now: datetime,
            actor: Actor = USER) -> CardRecord:
    to = status_after_dependencies(conn, card_id)
    reactions.move(conn, card_id, Action.UNBLOCK, to, actor=actor, now=now,
                   values={"error": None, "run_after": now}, note=note)
    _withdraw_approvals(conn, card_id, now, actor)
    reactions.requeued(conn, card_id, to, now=now, actor=actor)
    if note:
        add_comment(conn, card_id, f"{UNBLOCKED}{note}", author=actor.name, now=now)
    return get_card(conn, card_id)


def _withdraw_approvals(conn: Conn, card_id: int, now: datetime, actor: Actor) -> None:
    """A card unblocked or cancelled by hand no longer waits on the commands it asked to
    run: their requests are withdrawn (the next attempt asks again), not left pending."""
    conn.run("UPDATE approval SET decision = 'withdrawn', decided_by = :by, decided_at = :now "
             "WHERE card_id = :card AND decision = 'pending'",
             {"by": actor.name, "now": now, "card": card_id})


def cancel(conn: Conn, card_id: int, *, now: datetime, actor: Actor = USER,
           reason: str | None = None) -> CardRecord:
    """Cancel a card; a waiting card's unfinished children go with it (nobody awaits them)."""
    row = conn.one("SELECT status, waiting_on FROM card WHERE id = :id", {"id": card_id})
    reactions.move(conn, card_id, Action.CANCEL, CardStatus.CANCELLED, actor=actor, now=now,
                   outcome=Outcome.CANCELLED, values={"finished_at": now, "error": reason},
                   reason=reason)
    _withdraw_approvals(conn, card_id, now, actor)
    reactions.ended(conn, card_id, CardStatus.CANCELLED,
                    "was cancelled" + (f": {reason}" if reason else ""), reason, now=now,
                    actor=actor)
    if row is not None and row[0] == CardStatus.WAITING:
        for child in unsettled(conn, Delegation.from_json(row[1]).children):
            cancel(conn, child, now=now, actor=Actor(actor.name),
                   reason=f"its parent #{card_id} was cancelled")
    return get_card(conn, card_id)


def retry(conn: Conn, card_id: int, *, now: datetime, actor: Actor = USER) -> CardRecord:
    """Return a finished card to the queue with a fresh attempt budget.

    A done card that goes back sends its ready dependents back to todo: they must
    wait for the redone result.
    """
    card = get_card(conn, card_id)
    if card.key is not None and card.status in ALLOWED[Action.RETRY]:
        holder = card_with_key(conn, card.board, card.key)
        if holder is not None:
            raise InvalidTransition(f"cannot retry #{card_id}: #{holder.id} holds its key "
                                    f"{card.key!r} and is unfinished")
    to = status_after_dependencies(conn, card_id)
    reactions.move(conn, card_id, Action.RETRY, to, actor=actor, now=now, values={
        "result": None, "error": None, "finished_at": None, "archived_at": None,
        "run_after": now, "retry_base": card.attempt, "resume_base": card.attempt,
        "waiting_on": None,
    })
    reactions.reopened(conn, card_id, card.status, to, now=now, actor=actor)
    return get_card(conn, card_id)


def retry_all(conn: Conn, board: str, status: CardStatus, *, now: datetime,
              since: datetime | None = None, actor: Actor = USER) -> tuple[list[int], list[str]]:
    """Retry every unarchived `status` card of `board` (finished since `since`): the ids
    requeued, and why any could not be."""
    check(Action.RETRY, status, 0)
    sql = ("SELECT id FROM card WHERE board = :board AND status = :status AND "
           "archived_at IS NULL" + (" AND finished_at >= :since" if since is not None else ""))
    ids = conn.column(sql + " ORDER BY id", {"board": board, "status": status, "since": since})
    done, refused = [], []
    for card_id in ids:
        try:
            retry(conn, card_id, now=now, actor=actor)
        except InvalidTransition as exc:  # its key is held by an unfinished card
            refused.append(exc.message)
            continue
        done.append(card_id)
    return done, refused


def archive(conn: Conn, card_id: int, *, now: datetime, actor: Actor = USER) -> CardRecord:
    card = get_card(conn, card_id)
    check(Action.ARCHIVE, card.status, card_id)
    if card.archived_at is None:
        conn.run("UPDATE card SET archived_at = :now, updated_at = :now WHERE id = :id",
                   {"now": now, "id": card_id})
        record_event(conn, board=card.board, card_id=card_id, kind="archived", actor=actor.name,
                     at=now)
    return get_card(conn, card_id)


def fail(conn: Conn, card_id: int, error: str, *, now: datetime, actor: Actor,
         outcome: Outcome = Outcome.FAILED) -> CardRecord:
    """A fatal error: fail at once, burning no further attempts."""
    error = error[:v.MAX_COMMENT]
    reactions.move(conn, card_id, Action.FAIL, CardStatus.FAILED, actor=actor, now=now,
                   outcome=outcome, values={"error": error, "finished_at": now}, error=error)
    reactions.ended(conn, card_id, CardStatus.FAILED, f"failed: {error}", error, now=now,
                    actor=actor)
    return get_card(conn, card_id)


def requeue_or_fail(conn: Conn, card_id: int, outcome: Outcome, error: str, *,
                    now: datetime, actor: Actor, delay_s: float | None = None) -> CardRecord:
    """After a crash, timeout or lost lease: back to ready with backoff, or failed."""
    if actor.claim_token is not None:
        assert_lease(conn, card_id, actor.claim_token)
    card = get_card(conn, card_id)
    error = error[:v.MAX_COMMENT]
    used = card.attempt - card.retry_base
    if used >= card.max_attempts:
        msg = f"{error} (attempt {used} of {card.max_attempts}; no attempts left)"
        reactions.move(conn, card_id, Action.FAIL, CardStatus.FAILED, actor=actor, now=now,
                       outcome=outcome, values={"error": msg, "finished_at": now}, error=msg)
        reactions.ended(conn, card_id, CardStatus.FAILED, f"failed: {msg}", msg, now=now,
                        actor=actor)
        return get_card(conn, card_id)
    delay = retry_delay(used) if delay_s is None else delay_s
    run_after = now + timedelta(seconds=delay)
    to = status_after_dependencies(conn, card_id)  # a dependency redone while it ran: todo
    reactions.move(conn, card_id, Action.REQUEUE, to, actor=actor, now=now,
                   outcome=outcome, kind="requeued", values={"error": error,
                                                             "run_after": run_after},
                   error=error, run_after=run_after.isoformat())
    reactions.requeued(conn, card_id, to, now=now, actor=actor)
    return get_card(conn, card_id)


def hand_back(conn: Conn, card_id: int, reason: str, *, now: datetime, actor: Actor,
              outcome: Outcome = Outcome.HANDED_BACK, delay_s: float = 0.0) -> CardRecord:
    """Return a running card to ready without spending an attempt.

    For stops that are not the card's fault: a dispatcher shutting down or restarting,
    a worker that never started. The run is closed with `outcome` (default `handed_back`);
    the attempt it used is forgiven by moving the card's retry base past it.
    """
    if actor.claim_token is not None:
        assert_lease(conn, card_id, actor.claim_token)
    base = conn.scalar("SELECT retry_base FROM card WHERE id = :id", {"id": card_id})
    if base is None:
        raise CardNotFound(card_id)
    run_after = now + timedelta(seconds=delay_s)
    to = status_after_dependencies(conn, card_id)  # a dependency redone while it ran: todo
    reactions.move(conn, card_id, Action.HAND_BACK, to, actor=actor, now=now,
                   outcome=outcome, kind="handed_back",
                   values={"run_after": run_after, "retry_base": int(base) + 1}, error=reason)
    reactions.requeued(conn, card_id, to, now=now, actor=actor)
    return get_card(conn, card_id)


def wait(conn: Conn, card_id: int, delegation: Delegation, *, now: datetime,
         actor: Actor) -> CardRecord:
    """A run delegated: the card waits on its children, holding no worker. The run spends
    no attempt; if the children are already finished the card is ready again at once."""
    base = conn.scalar("SELECT retry_base FROM card WHERE id = :id", {"id": card_id})
    if base is None:
        raise CardNotFound(card_id)
    reactions.move(conn, card_id, Action.WAIT, CardStatus.WAITING, actor=actor, now=now,
                   outcome=Outcome.WAITING, kind="waiting",
                   values={"waiting_on": delegation.to_json(), "retry_base": int(base) + 1},
                   children=list(delegation.children))
    resume_if_settled(conn, card_id, now=now, actor=actor)
    return get_card(conn, card_id)
