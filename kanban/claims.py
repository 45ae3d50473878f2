"""Claims, leases and runs: the dispatcher's and workers' side of the board."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, insert, select, update

from kanban.errors import InvalidTransition, LeaseLost
from kanban.events import record_event, status_change
from kanban.records import Claim, MessageRecord, RunRecord
from kanban.states import CardStatus
from state import rawsql
from state.models import Card, Message, Run, Usage

card_t = Card.__table__
run_t = Run.__table__
message_t = Message.__table__
usage_t = Usage.__table__

_PICK = """
    SELECT c.id FROM card c JOIN board b ON b.name = c.board
    WHERE c.status = 'ready' AND c.run_after <= :now AND {not_paused} {filters}
      AND NOT EXISTS (SELECT 1 FROM setting WHERE key = 'spawn_paused' AND value = '1')
    ORDER BY c.priority DESC, c.id LIMIT :n
"""
_RETURNING = "RETURNING card.priority, card.id, card.board, card.attempt, card.claim_token, " \
             "card.profile, card.model, card.timeout_s"
_INSERT_RUN = """
INSERT INTO run (card_id, attempt, claim_token, dispatcher_id, host, pid, started_at,
                 heartbeat_at, input_tokens, output_tokens, cached_tokens)
VALUES (:card_id, :attempt, :token, :dispatcher_id, :host, :pid, :now, :now, 0, 0, 0)
RETURNING id
"""
_CLAIM_SQLITE = f"""
UPDATE card SET status = 'running', claim_token = lower(hex(randomblob(16))),
    attempt = attempt + 1, lease_expires_at = :lease_until, started_at = :now, updated_at = :now
WHERE id IN ({_PICK.format(not_paused="b.paused = 0", filters="{filters}")})
{_RETURNING}
"""
_CLAIM_POSTGRES = f"""
WITH picked AS MATERIALIZED (
    {_PICK.format(not_paused="NOT b.paused", filters="{filters}")} FOR UPDATE OF c SKIP LOCKED
)
UPDATE card SET status = 'running', claim_token = replace(gen_random_uuid()::text, '-', ''),
    attempt = card.attempt + 1, lease_expires_at = :lease_until, started_at = :now,
    updated_at = :now
FROM picked WHERE card.id = picked.id
{_RETURNING}
"""


@dataclass(frozen=True)
class ClaimFilter:
    """Which ready cards this dispatcher may take."""

    board: str | None = None
    exclude_profiles: Sequence[str] = ()


def _claim_sql(dialect: str, flt: ClaimFilter) -> str:
    filters = ""
    if flt.board is not None:
        filters += " AND c.board = :board"
    if flt.exclude_profiles:
        names = ", ".join(f":excluded_{i}" for i in range(len(flt.exclude_profiles)))
        filters += f" AND c.profile NOT IN ({names})"
    return (_CLAIM_POSTGRES if dialect == "postgresql" else _CLAIM_SQLITE).format(filters=filters)


def has_claimable(conn: Connection, *, now: datetime, flt: ClaimFilter = ClaimFilter()) -> bool:
    """A cheap read: is any card ready to claim? Saves taking the write lock for nothing."""
    query = select(card_t.c.id).where(card_t.c.status == CardStatus.READY,
                                      card_t.c.run_after <= now)
    if flt.board is not None:
        query = query.where(card_t.c.board == flt.board)
    if flt.exclude_profiles:
        query = query.where(card_t.c.profile.not_in(list(flt.exclude_profiles)))
    return conn.execute(query.limit(1)).first() is not None


def next_due(conn: Connection, *, now: datetime, flt: ClaimFilter = ClaimFilter()
             ) -> datetime | None:
    """When the earliest ready card held back by its backoff becomes claimable."""
    where = "status = 'ready' AND run_after > :now" + (
        " AND board = :board" if flt.board is not None else "")
    row = rawsql.fetchone(conn, f"SELECT min(run_after) FROM card WHERE {where}",
                          {"now": now, "board": flt.board})
    return rawsql.as_time(row[0]) if row else None


def claim(conn: Connection, n: int, *, now: datetime, lease_s: float,
          flt: ClaimFilter = ClaimFilter(), dispatcher_id: int | None = None,
          host: str | None = None) -> list[Claim]:
    """Atomically take up to n ready cards: one UPDATE … RETURNING, plus runs and events."""
    if n <= 0:
        return []
    lease_until = now + timedelta(seconds=lease_s)
    params: dict[str, Any] = {"now": now, "lease_until": lease_until, "n": n}
    if flt.board is not None:
        params["board"] = flt.board
    params.update({f"excluded_{i}": name for i, name in enumerate(flt.exclude_profiles)})
    rows = rawsql.fetchall(conn, _claim_sql(conn.dialect.name, flt), params)
    claims = []
    # queue order: priority first, then age (RETURNING gives no order)
    for _, card_id, board, attempt, token, profile, model, timeout_s in sorted(
            rows, key=lambda r: (-r[0], r[1])):
        run_id = rawsql.fetchone(conn, _INSERT_RUN, {
            "card_id": card_id, "attempt": attempt, "token": token,
            "dispatcher_id": dispatcher_id, "host": host, "pid": None, "now": now})[0]
        record_event(conn, board=board, card_id=card_id, run_id=run_id, kind="claimed",
                     actor=f"dispatcher:{dispatcher_id}" if dispatcher_id else "dispatcher",
                     at=now, attempt=attempt, **status_change(CardStatus.READY, CardStatus.RUNNING))
        claims.append(Claim(card_id, board, attempt, token, run_id, profile, model, timeout_s,
                            lease_until))
    return claims


def heartbeat(conn: Connection, card_id: int, claim_token: str, *, run_id: int, lease_s: float,
              now: datetime, note: str | None = None) -> datetime:
    """Renew the lease (fenced); returns the new expiry."""
    until = now + timedelta(seconds=lease_s)
    renewed = rawsql.fetchone(
        conn, "UPDATE card SET lease_expires_at = :until WHERE id = :card_id AND "
              "claim_token = :token AND status = 'running' RETURNING board",
        {"until": until, "card_id": card_id, "token": claim_token})
    if renewed is None:
        raise LeaseLost(f"lease on #{card_id} was lost; this worker must stop")
    if note:
        note = note[:2000]
        record_event(conn, board=renewed[0], card_id=card_id, run_id=run_id, kind="progress",
                     actor=f"card:#{card_id}", at=now, note=note)
    rawsql.run(conn, "UPDATE run SET heartbeat_at = :now, progress = coalesce(:note, progress) "
                     "WHERE id = :run_id AND card_id = :card_id AND claim_token = :token",
               {"now": now, "note": note or None, "run_id": run_id, "card_id": card_id,
                "token": claim_token})
    return until


def set_run_process(conn: Connection, run_id: int, *, pid: int, host: str) -> None:
    rawsql.run(conn, "UPDATE run SET pid = :pid, host = :host WHERE id = :id",
               {"pid": pid, "host": host, "id": run_id})


def record_exit(conn: Connection, run_id: int, exit_code: int) -> None:
    rawsql.run(conn, "UPDATE run SET exit_code = :code WHERE id = :id",
               {"code": exit_code, "id": run_id})


@dataclass(frozen=True)
class Lease:
    """A running card's lease as the dispatcher sees it."""

    card_id: int
    claim_token: str
    run_id: int
    lease_expires_at: datetime
    started_at: datetime | None
    timeout_s: float | None
    pid: int | None
    host: str | None


def running_leases(conn: Connection, *, board: str | None = None) -> list[Lease]:
    query = (
        select(card_t.c.id, card_t.c.claim_token, run_t.c.id, card_t.c.lease_expires_at,
               card_t.c.started_at, card_t.c.timeout_s, run_t.c.pid, run_t.c.host)
        .join(run_t, (run_t.c.card_id == card_t.c.id)
              & (run_t.c.claim_token == card_t.c.claim_token))
        .where(card_t.c.status == CardStatus.RUNNING)
    )
    if board is not None:
        query = query.where(card_t.c.board == board)
    return [Lease(*row) for row in conn.execute(query).all()]


def is_current(conn: Connection, card_id: int, claim_token: str) -> bool:
    return rawsql.fetchone(
        conn, "SELECT id FROM card WHERE id = :card_id AND claim_token = :token AND "
              "status = 'running'", {"card_id": card_id, "token": claim_token}) is not None


def append_message(conn: Connection, run_id: int, seq: int, message: dict[str, Any], *,
                   now: datetime) -> None:
    tool_calls = message.get("tool_calls") or None
    rawsql.run(conn, "INSERT INTO message (run_id, seq, role, content, tool_calls, tool_call_id, "
                     "name, at) VALUES (:run_id, :seq, :role, :content, :tool_calls, "
                     ":tool_call_id, :name, :at)", {
        "run_id": run_id, "seq": seq, "role": message["role"], "content": message.get("content"),
        "tool_calls": json.dumps(tool_calls) if tool_calls else None,
        "tool_call_id": message.get("tool_call_id"), "name": message.get("name"), "at": now,
    })


_ADD_TOKENS = ("UPDATE {table} SET input_tokens = input_tokens + :input_tokens, "
               "output_tokens = output_tokens + :output_tokens, "
               "cached_tokens = cached_tokens + :cached_tokens WHERE id = :id")


def record_usage(conn: Connection, run_id: int, card_id: int, model: str, *, input_tokens: int,
                 output_tokens: int, cached_tokens: int, now: datetime) -> None:
    tokens = {"input_tokens": input_tokens, "output_tokens": output_tokens,
              "cached_tokens": cached_tokens}
    rawsql.run(conn, "INSERT INTO usage (run_id, model, input_tokens, output_tokens, "
                     "cached_tokens, at) VALUES (:run_id, :model, :input_tokens, "
                     ":output_tokens, :cached_tokens, :at)",
               {"run_id": run_id, "model": model, "at": now, **tokens})
    rawsql.run(conn, _ADD_TOKENS.format(table="run"), {"id": run_id, **tokens})
    rawsql.run(conn, _ADD_TOKENS.format(table="card"), {"id": card_id, **tokens})


def run_transcript(conn: Connection, card_id: int) -> list[tuple[RunRecord, list[MessageRecord]]]:
    runs = conn.execute(select(run_t).where(run_t.c.card_id == card_id).order_by(run_t.c.id))
    out = []
    for run in [RunRecord.from_row(r) for r in runs.mappings()]:
        msgs = conn.execute(select(message_t).where(message_t.c.run_id == run.id)
                            .order_by(message_t.c.seq)).mappings()
        out.append((run, [MessageRecord.from_row(m) for m in msgs]))
    return out


def lease_of(conn: Connection, card_id: int) -> datetime | None:
    """When the card's current lease expires (None once it is not running)."""
    row = rawsql.fetchone(conn, "SELECT lease_expires_at FROM card WHERE id = :id",
                          {"id": card_id})
    return rawsql.as_time(row[0]) if row else None


def claim_card(conn: Connection, card_id: int, *, now: datetime, lease_s: float,
               host: str | None = None, actor: str = "lead") -> Claim:
    """Claim one specific ready card (the lead claims its own card this way)."""
    token = secrets.token_hex(16)
    lease_until = now + timedelta(seconds=lease_s)
    row = conn.execute(
        update(card_t)
        .where(card_t.c.id == card_id, card_t.c.status == CardStatus.READY)
        .values(status=CardStatus.RUNNING, claim_token=token, attempt=card_t.c.attempt + 1,
                lease_expires_at=lease_until, started_at=now, updated_at=now)
        .returning(card_t.c.board, card_t.c.attempt, card_t.c.profile, card_t.c.model,
                   card_t.c.timeout_s)
    ).first()
    if row is None:
        raise InvalidTransition(f"cannot claim #{card_id}: it is not ready")
    board, attempt, profile, model, timeout_s = row
    run_id = conn.execute(insert(run_t).returning(run_t.c.id), {
        "card_id": card_id, "attempt": attempt, "claim_token": token, "host": host,
        "pid": os.getpid(), "started_at": now, "heartbeat_at": now,
        "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
    }).scalar_one()
    record_event(conn, board=board, card_id=card_id, run_id=run_id, kind="claimed", actor=actor,
                 at=now, attempt=attempt, **status_change(CardStatus.READY, CardStatus.RUNNING))
    return Claim(card_id, board, attempt, token, run_id, profile, model, timeout_s, lease_until)
