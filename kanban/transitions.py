"""Every change of a card's state: one function each, one event each.

Callers hold a write transaction. A worker passes its claim token: the write is
fenced (`claim_token = :token AND status = 'running'`) and a stale token raises
LeaseLost instead of changing anything.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, insert, select, update

from kanban import validation as v
from kanban.cards import get_card
from kanban.dependencies import promote_ready, unfinished_dependencies
from kanban.errors import LeaseLost
from kanban.events import record_event, status_change
from kanban.records import CardRecord
from kanban.states import Action, CardStatus, Outcome, check
from state.models import Card, Comment, Dependency, Run

card_t = Card.__table__
run_t = Run.__table__
comment_t = Comment.__table__
dep_t = Dependency.__table__

BACKOFF_BASE_S = 2.0
BACKOFF_CAP_S = 300.0


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


def assert_lease(conn: Connection, card_id: int, claim_token: str) -> None:
    """Raise LeaseLost unless `claim_token` still holds card_id's lease."""
    row = conn.execute(
        select(card_t.c.id).where(
            card_t.c.id == card_id,
            card_t.c.claim_token == claim_token,
            card_t.c.status == CardStatus.RUNNING,
        )
    ).first()
    if row is None:
        raise LeaseLost(f"lease on #{card_id} was lost; this worker must stop")


def _move(
    conn: Connection,
    card: CardRecord,
    action: Action,
    to: CardStatus,
    *,
    actor: Actor,
    now: datetime,
    outcome: Outcome | None = None,
    kind: str | None = None,
    values: dict[str, Any] | None = None,
    **data: Any,
) -> CardRecord:
    """Check, update, close the run, write the event: one transition."""
    check(action, card.status, card.id)
    changes: dict[str, Any] = {"status": to, "updated_at": now, **(values or {})}
    where = [card_t.c.id == card.id, card_t.c.status == card.status]
    if card.status == CardStatus.RUNNING:
        changes.update(claim_token=None, lease_expires_at=None)
        if actor.claim_token is not None:
            where.append(card_t.c.claim_token == actor.claim_token)
    if conn.execute(update(card_t).where(and_(*where)).values(**changes)).rowcount != 1:
        raise LeaseLost(f"lease on #{card.id} was lost; this worker must stop")
    run_id = _close_run(conn, card.id, outcome, now, error=data.get("error")) if outcome else None
    record_event(conn, board=card.board, card_id=card.id, run_id=run_id, kind=kind or action,
                 actor=actor.name, at=now, **status_change(card.status, to, **data))
    return get_card(conn, card.id)


def _close_run(conn: Connection, card_id: int, outcome: Outcome, now: datetime,
               error: str | None = None, exit_code: int | None = None) -> int | None:
    row = conn.execute(
        update(run_t)
        .where(run_t.c.card_id == card_id, run_t.c.finished_at.is_(None))
        .values(finished_at=now, outcome=outcome, error=error, exit_code=exit_code)
        .returning(run_t.c.id)
    ).first()
    return row[0] if row else None


def _load(conn: Connection, card_id: int, actor: Actor, board: str | None) -> CardRecord:
    if actor.claim_token is not None:
        assert_lease(conn, card_id, actor.claim_token)
    return get_card(conn, card_id, board=board)


def complete(conn: Connection, card_id: int, summary: str, *, now: datetime,
             actor: Actor = USER, board: str | None = None, implicit: bool = False) -> CardRecord:
    v.text(summary, "summary", v.MAX_SUMMARY)
    card = _load(conn, card_id, actor, board)
    was_running = card.status == CardStatus.RUNNING
    done = _move(conn, card, Action.COMPLETE, CardStatus.DONE, actor=actor, now=now,
                 outcome=Outcome.COMPLETED if was_running else None,
                 values={"result": summary, "error": None, "finished_at": now},
                 implicit=implicit)
    dependents = select(dep_t.c.card_id).where(dep_t.c.depends_on_id == card_id)
    promote_ready(conn, now, candidates=list(conn.execute(dependents).scalars()))
    return done


def block(conn: Connection, card_id: int, reason: str, *, now: datetime, actor: Actor = USER,
          board: str | None = None) -> CardRecord:
    v.text(reason, "reason", v.MAX_COMMENT, required=True)
    card = _load(conn, card_id, actor, board)
    blocked = _move(conn, card, Action.BLOCK, CardStatus.BLOCKED, actor=actor, now=now,
                    outcome=Outcome.BLOCKED if card.status == CardStatus.RUNNING else None,
                    values={"error": reason}, reason=reason)
    add_comment(conn, card_id, f"blocked: {reason}", author=actor.name, now=now)
    return blocked


def unblock(conn: Connection, card_id: int, note: str | None, *, now: datetime,
            actor: Actor = USER) -> CardRecord:
    card = get_card(conn, card_id)
    to = _status_after_deps(conn, card_id)
    if note:
        add_comment(conn, card_id, f"unblocked: {note}", author=actor.name, now=now)
    return _move(conn, card, Action.UNBLOCK, to, actor=actor, now=now,
                 values={"error": None, "run_after": now}, note=note)


def cancel(conn: Connection, card_id: int, *, now: datetime, actor: Actor = USER,
           reason: str | None = None) -> CardRecord:
    card = get_card(conn, card_id)
    return _move(conn, card, Action.CANCEL, CardStatus.CANCELLED, actor=actor, now=now,
                 outcome=Outcome.CANCELLED if card.status == CardStatus.RUNNING else None,
                 values={"finished_at": now, "error": reason}, reason=reason)


def retry(conn: Connection, card_id: int, *, now: datetime, actor: Actor = USER) -> CardRecord:
    """Return a finished card to the queue with a fresh attempt budget."""
    card = get_card(conn, card_id)
    to = _status_after_deps(conn, card_id)
    return _move(conn, card, Action.RETRY, to, actor=actor, now=now, values={
        "result": None, "error": None, "finished_at": None, "archived_at": None,
        "run_after": now, "retry_base": card.attempt,
    })


def archive(conn: Connection, card_id: int, *, now: datetime, actor: Actor = USER) -> CardRecord:
    card = get_card(conn, card_id)
    check(Action.ARCHIVE, card.status, card_id)
    if card.archived_at is None:
        conn.execute(update(card_t).where(card_t.c.id == card_id)
                     .values(archived_at=now, updated_at=now))
        record_event(conn, board=card.board, card_id=card_id, kind="archived", actor=actor.name,
                     at=now)
    return get_card(conn, card_id)


def fail(conn: Connection, card_id: int, error: str, *, now: datetime, actor: Actor,
         outcome: Outcome = Outcome.FAILED) -> CardRecord:
    """A fatal error: fail at once, burning no further attempts."""
    card = _load(conn, card_id, actor, None)
    return _move(conn, card, Action.FAIL, CardStatus.FAILED, actor=actor, now=now,
                 outcome=outcome, values={"error": error[:v.MAX_COMMENT], "finished_at": now},
                 error=error[:v.MAX_COMMENT])


def requeue_or_fail(conn: Connection, card_id: int, outcome: Outcome, error: str, *,
                    now: datetime, actor: Actor, delay_s: float | None = None) -> CardRecord:
    """After a crash, timeout or lost lease: back to ready with backoff, or failed."""
    card = _load(conn, card_id, actor, None)
    error = error[:v.MAX_COMMENT]
    used = card.attempt - card.retry_base
    if used >= card.max_attempts:
        msg = f"{error} (attempt {used} of {card.max_attempts}; no attempts left)"
        return _move(conn, card, Action.FAIL, CardStatus.FAILED, actor=actor, now=now,
                     outcome=outcome, values={"error": msg, "finished_at": now}, error=msg)
    delay = retry_delay(card.attempt) if delay_s is None else delay_s
    run_after = now + timedelta(seconds=delay)
    return _move(conn, card, Action.REQUEUE, CardStatus.READY, actor=actor, now=now,
                 outcome=outcome, kind="requeued", values={"error": error, "run_after": run_after},
                 error=error, run_after=run_after.isoformat())


def add_comment(conn: Connection, card_id: int, body: str, *, author: str, now: datetime,
                board: str | None = None) -> int:
    v.text(body, "comment", v.MAX_COMMENT, required=True)
    card = get_card(conn, card_id, board=board)
    comment_id = conn.execute(
        insert(comment_t).returning(comment_t.c.id),
        {"card_id": card_id, "author": author, "body": body, "at": now},
    ).scalar_one()
    record_event(conn, board=card.board, card_id=card_id, kind="commented", actor=author, at=now,
                 comment_id=comment_id)
    return comment_id


def _status_after_deps(conn: Connection, card_id: int) -> CardStatus:
    deps = list(conn.execute(select(dep_t.c.depends_on_id).where(dep_t.c.card_id == card_id))
                .scalars())
    return CardStatus.TODO if unfinished_dependencies(conn, deps) else CardStatus.READY
