"""The PostgreSQL hot path: claim, heartbeat, complete and the workers' pids, each as one
self-contained statement (data-modifying CTEs), so each costs one round trip.

Same contract as the portable functions of claims.py and transitions.py (same rows, same
events, byte-for-byte the same event data); SQLite keeps those. Each statement is atomic
on its own and runs in autocommit (`db.statement()`): no BEGIN, no COMMIT.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from kanban import validation as v
from kanban.claims import ClaimFilter
from kanban.errors import LeaseLost
from kanban.records import CardRecord, Claim
from kanban.state.rows import with_times
from kanban.state.store import Database

_CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT c.id FROM card c JOIN board b ON b.name = c.board
    WHERE c.status = 'ready' AND c.run_after <= :now AND NOT b.paused {filters}
      AND NOT EXISTS (SELECT 1 FROM setting WHERE key = 'spawn_paused' AND value = '1')
    ORDER BY c.priority DESC, c.id LIMIT {limit}
    FOR UPDATE OF c SKIP LOCKED
), claimed AS (
    UPDATE card SET status = 'running', claim_token = replace(gen_random_uuid()::text, '-', ''),
        attempt = card.attempt + 1, lease_expires_at = :lease_until, started_at = :now,
        updated_at = :now
    FROM picked WHERE card.id = picked.id
    RETURNING card.priority, card.id, card.board, card.attempt, card.claim_token, card.profile,
              card.model, card.timeout_s, card.retry_base
), runs AS (
    INSERT INTO run (card_id, attempt, claim_token, dispatcher_id, host, pid, started_at,
                     heartbeat_at, input_tokens, output_tokens, cached_tokens)
    SELECT id, attempt, claim_token, :dispatcher_id, :host, NULL, :now, :now, 0, 0, 0
    FROM claimed ORDER BY priority DESC, id
    RETURNING id, card_id
), logged AS (
    INSERT INTO event (board, card_id, run_id, kind, actor, data, at)
    SELECT c.board, c.id, r.id, 'claimed', :actor,
           format('{{"attempt": %s, "from": "ready", "to": "running"}}', c.attempt), :now
    FROM claimed c JOIN runs r ON r.card_id = c.id ORDER BY c.priority DESC, c.id
)
SELECT c.id, c.board, c.attempt, c.claim_token, r.id, c.profile, c.model, c.timeout_s,
       c.retry_base
FROM claimed c JOIN runs r ON r.card_id = c.id ORDER BY c.priority DESC, c.id
"""


# Scheduled cards whose time came join the queue first (todo while a dependency is
# unfinished), with their `due` events: claims.release_due as one statement.
_RELEASE_DUE = """
WITH released AS (
    UPDATE card SET updated_at = :now, status = CASE WHEN EXISTS (
            SELECT 1 FROM dependency d JOIN card b ON b.id = d.depends_on_id
            WHERE d.card_id = card.id AND b.status != 'done') THEN 'todo' ELSE 'ready' END
    WHERE id IN (SELECT id FROM card WHERE status = 'scheduled' AND run_after <= :now {board}
                 FOR UPDATE SKIP LOCKED)
    RETURNING id, board, status
)
INSERT INTO event (board, card_id, run_id, kind, actor, data, at)
SELECT board, id, NULL, 'due', 'system',
       format('{{"from": "scheduled", "to": "%s"}}', status), :now
FROM released ORDER BY id
"""


def claim(db: Database, n: int, *, now: datetime, lease_s: float,
          flt: ClaimFilter | None = None, dispatcher_id: int | None = None,
          host: str | None = None) -> list[Claim]:
    """Up to n ready cards with their runs and `claimed` events: one statement."""
    if n <= 0:
        return []
    flt = flt or ClaimFilter()
    lease_until = now + timedelta(seconds=lease_s)
    filters = ""
    params: dict[str, Any] = {
        "now": now, "lease_until": lease_until, "dispatcher_id": dispatcher_id,
        "host": host, "actor": f"dispatcher:{dispatcher_id}" if dispatcher_id else "dispatcher"}
    if flt.board is not None:
        filters += " AND c.board = :board"
        params["board"] = flt.board
    if flt.exclude_profiles:
        filters += " AND NOT (c.profile = ANY(:excluded))"
        params["excluded"] = list(flt.exclude_profiles)
    release = _RELEASE_DUE.format(board=" AND board = :board" if flt.board is not None else "")
    with db.statement() as conn:
        # Pipelined: the release and the claim travel together with the pipeline's closing
        # Sync, one round trip for both; the claim's rows are read once it has closed
        # (fetched inside it, they cost a round trip of their own before the Sync's).
        with conn.raw.pipeline():
            conn.execute(release, {"now": now, **({"board": flt.board} if flt.board else {})})
            # LIMIT as a literal: a prepared claim's generic plan then expects n rows, where a
            # parameter made it expect a tenth of the board and join `card` by a full scan.
            claimed = conn.execute(_CLAIM.format(filters=filters, limit=int(n)), params)
        rows = claimed.fetchall()
    return [Claim(card_id, board, attempt, token, run_id, profile, model, timeout_s, lease_until,
                  base)
            for card_id, board, attempt, token, run_id, profile, model, timeout_s, base in rows]


_HEARTBEAT = """
WITH renewed AS (
    UPDATE card SET lease_expires_at = :until
    WHERE id = :card_id AND claim_token = :token AND status = 'running'
    RETURNING board
), beat AS (
    UPDATE run SET heartbeat_at = :now, progress = coalesce(:note::text, progress)
    WHERE id = :run_id AND card_id = :card_id AND claim_token = :token
      AND EXISTS (SELECT 1 FROM renewed)
), noted AS (
    INSERT INTO event (board, card_id, run_id, kind, actor, data, at)
    SELECT board, :card_id, :run_id, 'progress', :actor, :data, :now FROM renewed
    WHERE :note::text IS NOT NULL
)
SELECT board FROM renewed
"""


def heartbeat(db: Database, card_id: int, claim_token: str, *, run_id: int, lease_s: float,
              now: datetime, note: str | None = None) -> datetime:
    """Renew the lease (fenced) and record a progress note: one statement."""
    until = now + timedelta(seconds=lease_s)
    note = note[:2000] if note else None
    with db.statement() as conn:
        renewed = conn.one(_HEARTBEAT, {
            "until": until, "card_id": card_id, "token": claim_token, "run_id": run_id,
            "now": now, "note": note, "actor": f"card:#{card_id}",
            "data": json.dumps({"note": note}, sort_keys=True)})
    if renewed is None:
        raise LeaseLost(f"lease on #{card_id} was lost; this worker must stop")
    return until


_COMPLETE = """
WITH done AS (
    UPDATE card SET status = 'done', updated_at = :now, result = :summary, error = NULL,
        finished_at = :now, claim_token = NULL, lease_expires_at = NULL
    WHERE id = :card_id AND claim_token = :token AND status = 'running' AND review IS NULL
      AND parent_id IS NULL AND key IS NULL
      AND NOT EXISTS (SELECT 1 FROM notify_subscription s WHERE s.board = card.board)
    RETURNING card.*
), closed AS (
    UPDATE run SET finished_at = :now, outcome = 'completed', error = NULL
    WHERE card_id = :card_id AND finished_at IS NULL AND EXISTS (SELECT 1 FROM done)
    RETURNING run.id
), logged AS (
    INSERT INTO event (board, card_id, run_id, kind, actor, data, at)
    SELECT board, id, (SELECT min(id) FROM closed), 'complete', :actor, :data, :now FROM done
    RETURNING id
), promoted AS (
    UPDATE card SET status = 'ready', updated_at = :now, run_after = :now
    WHERE card.status = 'todo' AND EXISTS (SELECT 1 FROM logged)
      AND card.id IN (SELECT card_id FROM dependency WHERE depends_on_id = :card_id)
      AND NOT EXISTS (SELECT 1 FROM dependency d JOIN card b ON b.id = d.depends_on_id
                      WHERE d.card_id = card.id AND b.id <> :card_id AND b.status <> 'done')
    RETURNING card.id, card.board
), promoted_logged AS (
    INSERT INTO event (board, card_id, run_id, kind, actor, data, at)
    SELECT board, id, NULL, 'promoted', 'system', '{"from": "todo", "to": "ready"}', :now
    FROM promoted ORDER BY id
)
SELECT * FROM done
"""


def complete(db: Database, card_id: int, summary: str, *, claim_token: str, actor: str,
             now: datetime, implicit: bool = False) -> CardRecord:
    """A worker finishes its card (fenced): done, run closed, event, dependents promoted.
    LeaseLost also when the card has a review gate, or may end a card's wait (it was
    delegated, or a delegation may reuse it by key, or its board has notification
    subscriptions): `Kanban.complete` then takes the general path, which tells these apart,
    resumes the waiting card and queues the notifications."""
    v.text(summary, "summary", v.MAX_SUMMARY)
    data = json.dumps({"from": "running", "to": "done", "implicit": implicit}, sort_keys=True)
    with db.statement() as conn:
        row = conn.map(_COMPLETE, {"now": now, "summary": summary, "card_id": card_id,
                                   "token": claim_token, "actor": actor, "data": data})
    if row is None:
        raise LeaseLost(f"lease on #{card_id} was lost; this worker must stop")
    row.pop("claim_token", None)
    return CardRecord.from_row(with_times(row))


_RECORD_PROCESSES = """
UPDATE run SET pid = w.pid, host = :host, proc_start = w.proc_start
FROM (SELECT unnest(:ids::integer[]) AS id, unnest(:pids::integer[]) AS pid,
             unnest(:starts::bigint[]) AS proc_start) AS w
WHERE run.id = w.id
"""


def record_processes(db: Database, workers: Sequence[tuple[int, int, int | None]], *,
                     host: str) -> None:
    """(run id, pid, process start) of freshly spawned workers: one statement for all."""
    if not workers:
        return
    ids, pids, starts = (list(column) for column in zip(*workers, strict=True))
    with db.statement() as conn:
        conn.run(_RECORD_PROCESSES, {"host": host, "ids": ids, "pids": pids, "starts": starts})

