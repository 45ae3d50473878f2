"""Workers' fenced writes applied as a batch: completions, lease renewals and activity
snapshots that arrive together commit together, each still judged by its own claim token.

`apply(db, writes)` returns one outcome per write, in order: the write's result, or the
KanbanError that refused it (LeaseLost for a stale claim token). A refused write is undone
alone (a savepoint, or it simply matched no row), never its batch-mates. The outcomes are
returned only after the commit: nothing is acknowledged before it is durable. An error of
the database itself fails the batch; the writes are then tried one by one, so one bad
write cannot sink the others (never after a commit in doubt: they may have landed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kanban import claims, pg_batch, run_activity, transitions
from kanban import validation as v
from kanban.errors import KanbanError, LeaseLost
from kanban.state.errors import DatabaseError, TransientDatabaseError
from kanban.state.store import Conn, Database
from kanban.transitions import Actor

NOTE_CHARS = 2000  # as claims.heartbeat keeps


@dataclass(frozen=True)
class Completion:
    """A worker finishes its card (done, or review where the card has a gate)."""

    card_id: int
    claim_token: str
    summary: str
    actor: str
    implicit: bool = False
    gated: bool | None = None  # whether the card has a review gate, when the worker knows


@dataclass(frozen=True)
class Renewal:
    """A heartbeat: the lease renewed for `lease_s` more, with an optional progress note."""

    card_id: int
    claim_token: str
    run_id: int
    lease_s: float
    note: str | None = None


@dataclass(frozen=True)
class ActivityWrite:
    """What the worker's agent is doing now, stored on its run."""

    card_id: int
    claim_token: str
    run_id: int
    activity: dict[str, Any] = field(hash=False)


Write = Completion | Renewal | ActivityWrite
Outcome = Any  # a Renewal's new lease expiry, None for the others, or the refusing error


def is_refusal(exc: BaseException) -> bool:
    """A write turned down by the board's rules (stale token, bad input), not a failure of
    the database: it is answered alone and its batch-mates still commit."""
    return isinstance(exc, KanbanError) and not isinstance(exc, DatabaseError)


def apply(db: Database, writes: Sequence[Write], *, now: datetime) -> list[Outcome]:
    """Commit `writes` together; one outcome per write, available once committed."""
    if not writes:
        return []
    try:
        return _apply_together(db, writes, now)
    except DatabaseError as exc:
        in_doubt = isinstance(exc, TransientDatabaseError) and exc.in_doubt
        if len(writes) == 1 or in_doubt:
            raise
    return [_apply_alone(db, write, now) for write in writes]


def _apply_alone(db: Database, write: Write, now: datetime) -> Outcome:
    try:
        return _apply_together(db, [write], now)[0]
    except DatabaseError as exc:
        return exc


def _apply_together(db: Database, writes: Sequence[Write], now: datetime) -> list[Outcome]:
    if db.dialect == "postgresql":
        return _apply_postgres(db, writes, now)
    with db.write() as conn:
        return [_guarded(conn, write, now) for write in writes]


def _guarded(conn: Conn, write: Write, now: datetime) -> Outcome:
    """One write through the general path, in a savepoint: a refusal undoes it alone."""
    conn.execute("SAVEPOINT batch_write")
    try:
        outcome = _one(conn, write, now)
    except Exception as exc:
        if not is_refusal(exc):
            raise
        conn.execute("ROLLBACK TO SAVEPOINT batch_write")
        outcome = exc
    conn.execute("RELEASE SAVEPOINT batch_write")
    return outcome


def _one(conn: Conn, write: Write, now: datetime) -> Outcome:
    """The same functions a worker calls for a single write."""
    if isinstance(write, Completion):
        transitions.complete(conn, write.card_id, write.summary, now=now,
                             actor=Actor(write.actor, write.claim_token),
                             implicit=write.implicit, gated=write.gated)
        return None
    if isinstance(write, Renewal):
        return claims.heartbeat(conn, write.card_id, write.claim_token, run_id=write.run_id,
                                lease_s=write.lease_s, now=now, note=_note(write.note))
    transitions.assert_lease(conn, write.card_id, write.claim_token)
    if not run_activity.record_activity(conn, write.run_id, write.card_id, write.claim_token,
                                  write.activity, now=now):
        raise _lost(write.card_id)  # a run that is not this claim's
    return None


def _note(note: str | None) -> str | None:
    return note[:NOTE_CHARS] if note else None


def _apply_postgres(db: Database, writes: Sequence[Write], now: datetime) -> list[Outcome]:
    """One statement per kind of write (one for all completions, one for all renewals, one
    for all activity); what a statement left out takes the general path in a savepoint,
    which either does it (a gated card goes to review) or says why not."""
    outcomes: list[Outcome] = [_PENDING] * len(writes)
    kinds = {type(w) for w in writes}
    # One kind: the statement is atomic on its own (autocommit); several: one transaction.
    scope = db.statement if len(kinds) == 1 else db.write
    with scope() as conn:
        for kind, statement in _FAST.items():
            if kind in kinds:
                statement(conn, writes, outcomes, now)
    if any(o is _PENDING for o in outcomes):
        with db.write() as conn:
            for n, write in enumerate(writes):
                if outcomes[n] is _PENDING:
                    outcomes[n] = _guarded(conn, write, now)
    return outcomes


_PENDING: Any = object()  # left for the general path


def _firsts(writes: Sequence[Write], kind: type) -> list[tuple[int, Any]]:
    """(position, write) of `kind`, the first write per card only: a card's later writes in
    the same batch take the general path after it."""
    seen: set[int] = set()
    found = []
    for n, write in enumerate(writes):
        if isinstance(write, kind) and write.card_id not in seen:
            seen.add(write.card_id)
            found.append((n, write))
    return found


def _complete_fast(conn: Conn, writes: Sequence[Write], outcomes: list[Outcome],
                   now: datetime) -> None:
    firsts = []
    for n, w in _firsts(writes, Completion):
        try:
            v.text(w.summary, "summary", v.MAX_SUMMARY)
        except KanbanError as exc:
            outcomes[n] = exc
            continue
        if not w.gated:  # a gated card goes to review: the general path does that
            firsts.append((n, w))
    done = pg_batch.complete_many(conn, [(w.card_id, w.claim_token, w.summary, w.actor,
                                          w.implicit) for _, w in firsts], now=now)
    for n, w in firsts:
        if w.card_id in done:
            outcomes[n] = None


def _renew_fast(conn: Conn, writes: Sequence[Write], outcomes: list[Outcome],
                now: datetime) -> None:
    firsts = _firsts(writes, Renewal)
    untils = {n: now + timedelta(seconds=w.lease_s) for n, w in firsts}
    renewed = pg_batch.renew_many(conn, [(w.card_id, w.claim_token, w.run_id, untils[n],
                                          _note(w.note)) for n, w in firsts], now=now)
    for n, w in firsts:
        outcomes[n] = untils[n] if w.card_id in renewed else _lost(w.card_id)


def _activity_fast(conn: Conn, writes: Sequence[Write], outcomes: list[Outcome],
                   now: datetime) -> None:
    firsts = _firsts(writes, ActivityWrite)
    stored = pg_batch.store_activity_many(
        conn, [(w.card_id, w.claim_token, w.run_id, w.activity) for _, w in firsts], now=now)
    for n, w in firsts:
        outcomes[n] = None if w.card_id in stored else _lost(w.card_id)


def _lost(card_id: int) -> LeaseLost:
    return LeaseLost(f"lease on #{card_id} was lost; this worker must stop")


# Activity and renewals first: a completion in the same batch ends the lease they need.
_FAST: dict[type, Callable[[Conn, Sequence[Write], list[Outcome], datetime], None]] = {
    ActivityWrite: _activity_fast, Renewal: _renew_fast, Completion: _complete_fast}
