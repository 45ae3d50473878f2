"""Claims, leases and runs: the dispatcher's and workers' side of the board."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kanban.errors import InvalidTransition, LeaseLost
from kanban.events import record_event, status_change
from kanban.records import RUNS_OF_CARD, Claim, MessageRecord, RunRecord
from kanban.state.host import process_start
from kanban.state.plans import Plan, Query, Rows, run_plan
from kanban.state.rows import as_set_time, as_time, with_times
from kanban.state.store import Conn
from kanban.states import CardStatus

_PICK = """
    SELECT c.id FROM card c {ready_queue} JOIN board b ON b.name = c.board
    WHERE c.status = 'ready' AND c.run_after <= :now AND {not_paused} {filters}
      AND NOT EXISTS (SELECT 1 FROM setting WHERE key = 'spawn_paused' AND value = '1')
    ORDER BY c.priority DESC, c.id LIMIT :n
"""
_RETURNING = "RETURNING card.priority, card.id, card.board, card.attempt, card.claim_token, " \
             "card.profile, card.model, card.timeout_s, card.retry_base"
_INSERT_RUN = """
INSERT INTO run (card_id, attempt, claim_token, dispatcher_id, host, pid, started_at,
                 heartbeat_at, input_tokens, output_tokens, cached_tokens)
VALUES (:card_id, :attempt, :token, :dispatcher_id, :host, :pid, :now, :now, 0, 0, 0)
RETURNING id
"""
_CLAIM_SQLITE = f"""
UPDATE card SET status = 'running', claim_token = lower(hex(randomblob(16))),
    attempt = attempt + 1, lease_expires_at = :lease_until, started_at = :now, updated_at = :now
WHERE id IN ({_PICK.format(not_paused="b.paused = 0", filters="{filters}",
                           ready_queue="INDEXED BY ix_card_ready_queue")})
{_RETURNING}
"""
_CLAIM_POSTGRES = f"""
WITH picked AS MATERIALIZED (
    {_PICK.format(not_paused="NOT b.paused", filters="{filters}", ready_queue="")}
    FOR UPDATE OF c SKIP LOCKED
)
UPDATE card SET status = 'running', claim_token = replace(gen_random_uuid()::text, '-', ''),
    attempt = card.attempt + 1, lease_expires_at = :lease_until, started_at = :now,
    updated_at = :now
FROM picked WHERE card.id = picked.id
{_RETURNING}
"""


# A scheduled card whose time came joins the queue (or waits in todo for its dependencies).
# The partial index ix_card_scheduled serves the WHERE (SQLite is told so: the index on
# status would visit every scheduled card); one statement per claim.
_RELEASE_DUE = """
UPDATE card SET updated_at = :now, status = CASE WHEN EXISTS (
        SELECT 1 FROM dependency d JOIN card b ON b.id = d.depends_on_id
        WHERE d.card_id = card.id AND b.status != 'done') THEN 'todo' ELSE 'ready' END
WHERE id IN (SELECT id FROM card {scheduled} WHERE status = 'scheduled' AND run_after <= :now
             {board}{lock})
RETURNING id, board, status
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


def has_claimable(conn: Conn, *, now: datetime, flt: ClaimFilter = ClaimFilter()) -> bool:
    """A cheap read: is any card ready to claim (or scheduled and due)? Saves taking the
    write lock for nothing."""
    sql = "SELECT id FROM card WHERE status = 'ready' AND run_after <= :now"
    params: dict[str, Any] = {"now": now}
    board = ""
    if flt.board is not None:
        board = " AND board = :board"
        params["board"] = flt.board
    sql += board
    if flt.exclude_profiles:
        names = ", ".join(f":excluded_{i}" for i in range(len(flt.exclude_profiles)))
        sql += f" AND profile NOT IN ({names})"
        params.update({f"excluded_{i}": name for i, name in enumerate(flt.exclude_profiles)})
    if conn.one(sql + " LIMIT 1", params) is not None:
        return True
    return conn.one("SELECT id FROM card WHERE status = 'scheduled' AND run_after <= :now"
                    f"{board} LIMIT 1", params) is not None


def next_due(conn: Conn, *, now: datetime, flt: ClaimFilter = ClaimFilter()
             ) -> datetime | None:
    """When the earliest card held back by its backoff or its schedule becomes claimable."""
    board = " AND board = :board" if flt.board is not None else ""
    params = {"now": now, "board": flt.board}
    # the first ready card past now, not a walk of the board's ready cards (a backlog)
    due = "" if conn.dialect == "postgresql" else " INDEXED BY ix_card_ready_due"
    times = [as_time(conn.scalar(f"SELECT min(run_after) FROM card{due} WHERE status = "
                                 f"'ready' AND run_after > :now{board}", params)),
             as_time(conn.scalar(f"SELECT min(run_after) FROM card WHERE status = 'scheduled'"
                                 f"{board}", params))]
    return min((t for t in times if t is not None), default=None)


def release_due(conn: Conn, *, now: datetime, board: str | None = None) -> list[int]:
    """Scheduled cards whose time came: ready (todo while a dependency is unfinished)."""
    postgres = conn.dialect == "postgresql"
    sql = _RELEASE_DUE.format(board=" AND board = :board" if board is not None else "",
                              lock=" FOR UPDATE SKIP LOCKED" if postgres else "",
                              scheduled="" if postgres else "INDEXED BY ix_card_scheduled")
    released = conn.all(sql, {"now": now, "board": board})
    for card_id, card_board, status in released:
        record_event(conn, board=card_board, card_id=card_id, kind="due", actor="system",
                     at=now, **status_change(CardStatus.SCHEDULED, status))
    return sorted(card_id for card_id, _, _ in released)


def claim(conn: Conn, n: int, *, now: datetime, lease_s: float,
          flt: ClaimFilter = ClaimFilter(), dispatcher_id: int | None = None,
          host: str | None = None) -> list[Claim]:
    """Atomically take up to n ready cards: one UPDATE … RETURNING, plus runs and events."""
    if n <= 0:
        return []
    release_due(conn, now=now, board=flt.board)
    lease_until = now + timedelta(seconds=lease_s)
    params: dict[str, Any] = {"now": now, "lease_until": lease_until, "n": n}
    if flt.board is not None:
        params["board"] = flt.board
    params.update({f"excluded_{i}": name for i, name in enumerate(flt.exclude_profiles)})
    rows = conn.all(_claim_sql(conn.dialect, flt), params)
    claims = []
    # queue order: priority first, then age (RETURNING gives no order)
    for _, card_id, board, attempt, token, profile, model, timeout_s, base in sorted(
            rows, key=lambda r: (-r[0], r[1])):
        run_id = conn.one(_INSERT_RUN, {
            "card_id": card_id, "attempt": attempt, "token": token,
            "dispatcher_id": dispatcher_id, "host": host, "pid": None, "now": now})[0]
        record_event(conn, board=board, card_id=card_id, run_id=run_id, kind="claimed",
                     actor=f"dispatcher:{dispatcher_id}" if dispatcher_id else "dispatcher",
                     at=now, attempt=attempt, **status_change(CardStatus.READY, CardStatus.RUNNING))
        claims.append(Claim(card_id, board, attempt, token, run_id, profile, model, timeout_s,
                            lease_until, base))
    return claims


def heartbeat(conn: Conn, card_id: int, claim_token: str, *, run_id: int, lease_s: float,
              now: datetime, note: str | None = None) -> datetime:
    """Renew the lease (fenced); returns the new expiry."""
    until = now + timedelta(seconds=lease_s)
    renewed = conn.one("UPDATE card SET lease_expires_at = :until WHERE id = :card_id AND "
              "claim_token = :token AND status = 'running' RETURNING board",
        {"until": until, "card_id": card_id, "token": claim_token})
    if renewed is None:
        raise LeaseLost(f"lease on #{card_id} was lost; this worker must stop")
    if note:
        note = note[:2000]
        record_event(conn, board=renewed[0], card_id=card_id, run_id=run_id, kind="progress",
                     actor=f"card:#{card_id}", at=now, note=note)
    conn.run("UPDATE run SET heartbeat_at = :now, progress = coalesce(:note, progress) "
                     "WHERE id = :run_id AND card_id = :card_id AND claim_token = :token",
               {"now": now, "note": note or None, "run_id": run_id, "card_id": card_id,
                "token": claim_token})
    return until


def set_run_process(conn: Conn, run_id: int, *, pid: int, host: str,
                    proc_start: int | None = None) -> None:
    """The worker's process: pid, host and start time ((boot, pid, start) names it)."""
    conn.run("UPDATE run SET pid = :pid, host = :host, proc_start = :start WHERE id = :id",
               {"pid": pid, "host": host, "start": proc_start, "id": run_id})


def record_exit(conn: Conn, run_id: int, exit_code: int) -> None:
    conn.run("UPDATE run SET exit_code = :code WHERE id = :id",
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
    dispatcher_id: int | None = None  # the dispatcher that claimed it
    proc_start: int | None = None  # the worker process's start (ticks after boot)
    profile: str = "default"


def running_leases(conn: Conn, *, board: str | None = None) -> list[Lease]:
    sql = ("SELECT c.id, c.claim_token, r.id, c.lease_expires_at, c.started_at, c.timeout_s, "
           "r.pid, r.host, r.dispatcher_id, r.proc_start, c.profile FROM card c JOIN run r "
           "ON r.card_id = c.id AND r.claim_token = c.claim_token WHERE c.status = 'running'")
    if board is not None:
        sql += " AND c.board = :board"
    return [Lease(card_id, token, run_id, as_set_time(lease), as_time(started), timeout, pid,
                  host, dispatcher_id, proc_start, profile)
            for card_id, token, run_id, lease, started, timeout, pid, host, dispatcher_id,
            proc_start, profile in conn.all(sql, {"board": board})]


def unstarted_claims(conn: Conn, dispatcher_id: int) -> list[Claim]:
    """This dispatcher's claims that no worker was started for: a claim whose COMMIT
    reached the server while the connection dropped looks failed to the dispatcher, yet
    holds its card. Read after an outage so the dispatcher can start or hand them back."""
    rows = conn.all(
        "SELECT c.id, c.board, c.attempt, c.claim_token, r.id, c.profile, c.model, "
        "c.timeout_s, c.lease_expires_at, c.retry_base FROM run r JOIN card c "
        "ON c.id = r.card_id "
        "AND c.claim_token = r.claim_token WHERE r.dispatcher_id = :dispatcher_id "
        "AND r.pid IS NULL AND r.finished_at IS NULL AND c.status = 'running' ORDER BY c.id",
        {"dispatcher_id": dispatcher_id})
    return [Claim(card_id, board, attempt, token, run_id, profile, model, timeout_s,
                  as_set_time(lease), base)
            for card_id, board, attempt, token, run_id, profile, model, timeout_s, lease, base
            in rows]


def is_current(conn: Conn, card_id: int, claim_token: str) -> bool:
    return conn.one("SELECT id FROM card WHERE id = :card_id AND claim_token = :token AND "
              "status = 'running'", {"card_id": card_id, "token": claim_token}) is not None


def has_message(conn: Conn, run_id: int, seq: int) -> bool:
    """Whether the run's transcript already holds message `seq` (a retried write's check)."""
    return conn.one("SELECT 1 FROM message WHERE run_id = :run_id AND seq = :seq",
                    {"run_id": run_id, "seq": seq}) is not None


def append_message(conn: Conn, run_id: int, seq: int, message: dict[str, Any], *,
                   now: datetime) -> None:
    """One transcript message (a `Message.to_dict()`): reasoning and the answering model
    have columns; `is_error` and provider reasoning blocks go in `data`."""
    tool_calls = message.get("tool_calls") or None
    data = {key: message[key] for key in ("is_error", "reasoning_data") if message.get(key)}
    conn.run("INSERT INTO message (run_id, seq, role, content, tool_calls, tool_call_id, "
             "name, at, reasoning, model, data) VALUES (:run_id, :seq, :role, :content, "
             ":tool_calls, :tool_call_id, :name, :at, :reasoning, :model, :data)", {
        "run_id": run_id, "seq": seq, "role": message["role"], "content": message.get("content"),
        "tool_calls": json.dumps(tool_calls) if tool_calls else None,
        "tool_call_id": message.get("tool_call_id"), "name": message.get("name"), "at": now,
        "reasoning": message.get("reasoning"), "model": message.get("model"),
        "data": json.dumps(data) if data else None,
    })


_CARD_MESSAGES = "FROM message m JOIN run r ON r.id = m.run_id WHERE r.card_id = :card"


def transcript_chars(conn: Conn, card_id: int) -> int:
    """Characters of text a card's transcript holds, over all its runs."""
    return int(conn.scalar(
        "SELECT coalesce(sum(length(coalesce(m.content, '')) + length(coalesce(m.tool_calls, "
        f"'')) + length(coalesce(m.reasoning, ''))), 0) {_CARD_MESSAGES}", {"card": card_id}))


def cut_tool_results(conn: Conn, card_id: int, keep: int, cut: Callable[[str], str], *,
                     batch: int = 200) -> int:
    """Store a card's oldest long tool results cut (`cut(content)`, about `keep` long);
    returns the characters freed."""
    rows = conn.all(f"SELECT m.id, m.content {_CARD_MESSAGES} AND m.role = 'tool' "
                    "AND length(m.content) > :longer ORDER BY m.id LIMIT :batch",
                    {"card": card_id, "longer": keep + 200, "batch": batch})
    freed = 0
    for message_id, content in rows:
        shorter = cut(content)
        conn.run("UPDATE message SET content = :content WHERE id = :id",
                 {"content": shorter, "id": message_id})
        freed += len(content) - len(shorter)
    return freed


_ADD_TOKENS = ("UPDATE {table} SET input_tokens = input_tokens + :input_tokens, "
               "output_tokens = output_tokens + :output_tokens, "
               "cached_tokens = cached_tokens + :cached_tokens, "
               "cost = cost + :cost WHERE id = :id")


def record_usage(conn: Conn, run_id: int, card_id: int, model: str, *, input_tokens: int,
                 output_tokens: int, cached_tokens: int, now: datetime,
                 cost: float | None = None) -> None:
    """One model call's tokens and cost (None: unknown price), added to its run and card."""
    tokens = {"input_tokens": input_tokens, "output_tokens": output_tokens,
              "cached_tokens": cached_tokens}
    conn.run("INSERT INTO usage (run_id, model, input_tokens, output_tokens, "
             "cached_tokens, at, cost) VALUES (:run_id, :model, :input_tokens, "
             ":output_tokens, :cached_tokens, :at, :cost)",
             {"run_id": run_id, "model": model, "at": now, "cost": cost, **tokens})
    # card before run: the order the heartbeat and the transitions lock them in
    conn.run(_ADD_TOKENS.format(table="card"), {"id": card_id, "cost": cost or 0.0, **tokens})
    conn.run(_ADD_TOKENS.format(table="run"), {"id": run_id, "cost": cost or 0.0, **tokens})


def run_transcript(conn: Conn, card_id: int) -> list[tuple[RunRecord, list[MessageRecord]]]:
    return run_plan(conn, run_transcript_plan(card_id))


def run_transcript_plan(card_id: int) -> Plan[list[tuple[RunRecord, list[MessageRecord]]]]:
    """Every run of a card, oldest first, each with its messages in order."""
    runs: Rows = yield Query(RUNS_OF_CARD, {"id": card_id})
    messages: Rows = yield Query(
        "SELECT m.* FROM message m JOIN run r ON r.id = m.run_id WHERE r.card_id = :id "
        "ORDER BY m.run_id, m.seq", {"id": card_id})
    by_run: dict[int, list[MessageRecord]] = {}
    for m in messages.maps():
        by_run.setdefault(m["run_id"], []).append(MessageRecord.from_row(with_times(m)))
    return [(run, by_run.get(run.id, []))
            for run in [RunRecord.from_row(with_times(r)) for r in runs.maps()]]


def current_lease(conn: Conn, card_id: int, claim_token: str) -> datetime | None:
    """When claim_token's lease on the card expires; None once it holds it no more. On
    PostgreSQL the row stays locked to the end of the transaction, so no renewal slips in."""
    lock = " FOR UPDATE" if conn.dialect == "postgresql" else ""
    row = conn.one("SELECT lease_expires_at FROM card WHERE id = :id AND claim_token = :token "
                   f"AND status = 'running'{lock}", {"id": card_id, "token": claim_token})
    return as_time(row[0]) if row else None


def lease_of(conn: Conn, card_id: int) -> datetime | None:
    """When the card's current lease expires (None once it is not running)."""
    row = conn.one("SELECT lease_expires_at FROM card WHERE id = :id",
                          {"id": card_id})
    return as_time(row[0]) if row else None


def claim_card(conn: Conn, card_id: int, *, now: datetime, lease_s: float,
               host: str | None = None, actor: str = "lead") -> Claim:
    """Claim one specific ready card (the lead claims its own card this way)."""
    token = secrets.token_hex(16)
    lease_until = now + timedelta(seconds=lease_s)
    row = conn.one(
        "UPDATE card SET status = 'running', claim_token = :token, attempt = attempt + 1, "
        "lease_expires_at = :lease_until, started_at = :now, updated_at = :now "
        "WHERE id = :id AND status = 'ready' "
        "RETURNING board, attempt, profile, model, timeout_s, retry_base",
        {"token": token, "lease_until": lease_until, "now": now, "id": card_id})
    if row is None:
        raise InvalidTransition(f"cannot claim #{card_id}: it is not ready")
    board, attempt, profile, model, timeout_s, base = row
    run_id = conn.one(_INSERT_RUN, {
        "card_id": card_id, "attempt": attempt, "token": token, "dispatcher_id": None,
        "host": host, "pid": os.getpid(), "now": now})[0]
    # (pid, start) name this process: a later reader can prove it gone (kanban/lead_liveness)
    set_run_process(conn, run_id, pid=os.getpid(), host=host or "",
                    proc_start=process_start(os.getpid()))
    record_event(conn, board=board, card_id=card_id, run_id=run_id, kind="claimed", actor=actor,
                 at=now, attempt=attempt, **status_change(CardStatus.READY, CardStatus.RUNNING))
    return Claim(card_id, board, attempt, token, run_id, profile, model, timeout_s, lease_until,
                 base)
