"""Every change of a card's state: one function each, one event each.

Callers hold a write transaction. A worker passes its claim token: the change is
one fenced `UPDATE … WHERE claim_token = :token AND status = 'running'`, and a
stale token raises LeaseLost instead of changing anything. These run on the
driver connection: they are the hot path of every worker.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from kanban import validation as v
from kanban.cards import card_with_key, get_card
from kanban.children import SETTLED, Delegation, unsettled
from kanban.comments import UNBLOCKED, add_comment
from kanban.dependencies import (
    demote_dependents,
    promote_dependents,
    release_dependents,
    status_after_dependencies,
)
from kanban.errors import CardNotFound, InvalidTransition, LeaseLost
from kanban.events import record_event, status_change
from kanban.notify import outbox
from kanban.records import CardRecord
from kanban.state.store import Conn
from kanban.states import ALLOWED, Action, CardStatus, Outcome, check

if TYPE_CHECKING:
    from kanban.review import Verdict

BACKOFF_BASE_S = 2.0
BACKOFF_CAP_S = 300.0
_LEASE_HELD = "id = :card_id AND claim_token = :token AND status = 'running'"


@dataclass(frozen=True)
class Actor:
    """Who makes a change, and with which claim token if a worker."""

    name: str = "user"
    claim_token: str | None = None


USER = Actor()


def retry_delay(attempt: int, *, rng: random.Random | None = None) -> float:
    """Jittered exponential backoff: base·2^(attempt-1), capped, scaled by [0.5, 1)."""
    raw = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** max(0, attempt - 1))
    return raw * (0.5 + 0.5 * (rng or random).random())


def _lost(card_id: int) -> LeaseLost:
    return LeaseLost(f"lease on #{card_id} was lost; this worker must stop")


def assert_lease(conn: Conn, card_id: int, claim_token: str) -> None:
    """Raise LeaseLost unless `claim_token` still holds card_id's lease."""
    row = conn.one(f"SELECT id FROM card WHERE {_LEASE_HELD}",
                          {"card_id": card_id, "token": claim_token})
    if row is None:
        raise _lost(card_id)


def _current_status(conn: Conn, card_id: int, board: str | None) -> str:
    row = conn.one("SELECT status, board FROM card WHERE id = :id", {"id": card_id})
    if row is None or (board is not None and row[1] != board):
        raise CardNotFound(card_id, board)
    return str(row[0])


class Moved(NamedTuple):
    """What a transition's UPDATE … RETURNING told: the board, and whether cards that depend
    on this one wait in todo or are blocked by it (none: no statement for them)."""

    board: str
    todo_dependents: bool
    blocked_dependents: bool


# Answered by the UPDATE itself (indexes on depends_on_id and on board and status), so a
# card without such dependents, on a board where nothing waits, costs no further statement.
# (The CAST: SQLite gives a RETURNING column no affinity, and would scan the index without.)
_DEPENDENT_IN = ("EXISTS (SELECT 1 FROM dependency d JOIN card x ON x.id = d.card_id "
                 "WHERE d.depends_on_id = card.id AND x.status = '{}')")
_MOVED = (f"RETURNING board, {_DEPENDENT_IN.format('todo')}, {_DEPENDENT_IN.format('blocked')}, "
          "EXISTS (SELECT 1 FROM card w WHERE w.board = CAST(card.board AS TEXT) "
          "AND w.status = 'waiting')")
# A move into a state subscribers hear of also asks whether its board has subscriptions.
_MOVED_NOTIFIED = f"{_MOVED}, {outbox.SUBSCRIBED}"


def move(
    conn: Conn,
    card_id: int,
    action: Action,
    to: CardStatus,
    *,
    actor: Actor,
    now: datetime,
    board: str | None = None,
    outcome: Outcome | None = None,
    kind: str | None = None,
    values: dict[str, Any] | None = None,
    guard: str | None = None,
    **data: Any,
) -> Moved:
    """Check, update (fenced for workers), close the run, write the event; returns the board
    and what the update saw of the card's dependents. `guard`: one more condition of the
    update (unmet: LeaseLost, as a lost lease is)."""
    params: dict[str, Any] = {"card_id": card_id}
    if actor.claim_token is not None:
        frm, where = CardStatus.RUNNING.value, _LEASE_HELD
        params["token"] = actor.claim_token
    else:
        frm, where = _current_status(conn, card_id, board), "id = :card_id AND status = :frm"
        params["frm"] = frm
    check(action, frm, card_id)
    changes: dict[str, Any] = {"status": to, "updated_at": now, **(values or {})}
    if frm == CardStatus.RUNNING:
        changes.update(claim_token=None, lease_expires_at=None)
    params.update({f"set_{k}": value for k, value in changes.items()})
    sets = ", ".join(f"{k} = :set_{k}" for k in changes)
    if guard is not None:
        where = f"{where} AND {guard}"
    notified = to in outbox.NOTIFIED
    row = conn.one(f"UPDATE card SET {sets} WHERE {where} "
                   f"{_MOVED_NOTIFIED if notified else _MOVED}", params)
    if row is None:
        raise _lost(card_id)
    run_id = None
    if outcome is not None and frm == CardStatus.RUNNING:
        run_id = _close_run(conn, card_id, outcome, now, error=data.get("error"))
    record_event(conn, board=row[0], card_id=card_id, run_id=run_id, kind=kind or action,
                 actor=actor.name, at=now, **status_change(frm, to, **data))
    if notified and row[4]:  # written with the move, so no event is lost or sent early
        outbox.queue(conn, row[0], card_id, frm, to, actor=actor.name, now=now)
    if to in SETTLED and row[3]:  # the last child to finish wakes the card waiting on it
        from kanban.waiting import wake_waiters  # it builds on this module

        wake_waiters(conn, row[0], card_id, now=now)
    return Moved(str(row[0]), bool(row[1]), bool(row[2]))


def _close_run(conn: Conn, card_id: int, outcome: Outcome, now: datetime,
               error: str | None = None) -> int | None:
    row = conn.one("UPDATE run SET finished_at = :now, outcome = :outcome, "
                                "error = :error WHERE card_id = :card_id AND finished_at IS NULL "
                                "RETURNING id",
                          {"now": now, "outcome": outcome, "error": error, "card_id": card_id})
    return row[0] if row else None


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
        moved = move(conn, card_id, Action.COMPLETE, CardStatus.DONE, actor=actor, now=now,
                     board=board, outcome=Outcome.COMPLETED, values={
                         "result": summary, "error": None, "finished_at": now},
                     guard="review IS NULL" if worker and gated is None else None,
                     implicit=implicit)
    except LeaseLost:
        if not (worker and gated is None and _gated(conn, card_id)):
            raise
        return _submit(conn, card_id, summary, now=now, actor=actor, verdict=verdict)
    if moved.blocked_dependents:  # (those it frees are promoted there, if ready)
        release_dependents(conn, card_id, now, actor=actor.name)
    if moved.todo_dependents:
        promote_dependents(conn, card_id, now)


def _gated(conn: Conn, card_id: int) -> bool:
    return conn.scalar("SELECT review FROM card WHERE id = :id", {"id": card_id}) is not None


def _submit(conn: Conn, card_id: int, summary: str, *, now: datetime, actor: Actor,
            verdict: Verdict | None) -> None:
    from kanban import review  # review gates build on this module

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
    move(conn, card_id, Action.BLOCK, CardStatus.BLOCKED, actor=actor, now=now, board=board,
          outcome=Outcome.BLOCKED, values=values, reason=reason)
    add_comment(conn, card_id, f"blocked: {reason}", author=actor.name, now=now)
    return get_card(conn, card_id)


def unblock(conn: Conn, card_id: int, note: str | None, *, now: datetime,
            actor: Actor = USER) -> CardRecord:
    to = status_after_dependencies(conn, card_id)
    move(conn, card_id, Action.UNBLOCK, to, actor=actor, now=now,
          values={"error": None, "run_after": now}, note=note)
    _withdraw_approvals(conn, card_id, now, actor)
    if to == CardStatus.TODO:
        _block_if_dependency_ended(conn, card_id, now, actor)
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
    move(conn, card_id, Action.CANCEL, CardStatus.CANCELLED, actor=actor, now=now,
         outcome=Outcome.CANCELLED, values={"finished_at": now, "error": reason}, reason=reason)
    _withdraw_approvals(conn, card_id, now, actor)
    _ended(conn, card_id, CardStatus.CANCELLED,
           "was cancelled" + (f": {reason}" if reason else ""), reason, now, actor)
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
    move(conn, card_id, Action.RETRY, to, actor=actor, now=now, values={
        "result": None, "error": None, "finished_at": None, "archived_at": None,
        "run_after": now, "retry_base": card.attempt, "resume_base": card.attempt,
        "waiting_on": None,
    })
    if card.status == CardStatus.DONE:
        demote_dependents(conn, card_id, now, actor=actor.name)
    else:
        release_dependents(conn, card_id, now, actor=actor.name)
    if to == CardStatus.TODO:
        _block_if_dependency_ended(conn, card_id, now, actor)
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
    move(conn, card_id, Action.FAIL, CardStatus.FAILED, actor=actor, now=now, outcome=outcome,
          values={"error": error, "finished_at": now}, error=error)
    _ended(conn, card_id, CardStatus.FAILED, f"failed: {error}", error, now, actor)
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
        move(conn, card_id, Action.FAIL, CardStatus.FAILED, actor=actor, now=now,
              outcome=outcome, values={"error": msg, "finished_at": now}, error=msg)
        _ended(conn, card_id, CardStatus.FAILED, f"failed: {msg}", msg, now, actor)
        return get_card(conn, card_id)
    delay = retry_delay(used) if delay_s is None else delay_s
    run_after = now + timedelta(seconds=delay)
    move(conn, card_id, Action.REQUEUE, CardStatus.READY, actor=actor, now=now, outcome=outcome,
          kind="requeued", values={"error": error, "run_after": run_after}, error=error,
          run_after=run_after.isoformat())
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
    move(conn, card_id, Action.HAND_BACK, CardStatus.READY, actor=actor, now=now,
          outcome=outcome, kind="handed_back",
          values={"run_after": run_after, "retry_base": int(base) + 1}, error=reason)
    return get_card(conn, card_id)


def wait(conn: Conn, card_id: int, delegation: Delegation, *, now: datetime,
         actor: Actor) -> CardRecord:
    """A run delegated: the card waits on its children, holding no worker. The run spends
    no attempt; if the children are already finished the card is ready again at once."""
    base = conn.scalar("SELECT retry_base FROM card WHERE id = :id", {"id": card_id})
    if base is None:
        raise CardNotFound(card_id)
    move(conn, card_id, Action.WAIT, CardStatus.WAITING, actor=actor, now=now,
          outcome=Outcome.WAITING, kind="waiting",
          values={"waiting_on": delegation.to_json(), "retry_base": int(base) + 1},
          children=list(delegation.children))
    from kanban.waiting import resume_if_settled  # it builds on this module

    resume_if_settled(conn, card_id, now=now, actor=actor)
    return get_card(conn, card_id)


def _ended(conn: Conn, card_id: int, status: str, how: str, why: str | None, now: datetime,
           actor: Actor) -> None:
    """A card failed or was cancelled: its dependents, then the card it reviews or triages."""
    from kanban.dependency_failure import dependency_ended  # both build on this module
    from kanban.review import helper_ended

    dependency_ended(conn, card_id, how, now=now, actor=actor.name)
    helper_ended(conn, card_id, status, why, now=now)


def _block_if_dependency_ended(conn: Conn, card_id: int, now: datetime, actor: Actor) -> None:
    from kanban.dependency_failure import block_if_dependency_ended

    block_if_dependency_ended(conn, card_id, now=now, actor=actor.name)
