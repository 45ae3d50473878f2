"""The PostgreSQL group-commit statements: many workers' completions, lease renewals or
activity snapshots in one statement each, fenced card by card.

Each statement takes its writes as parallel arrays (`unnest`) and returns the cards whose
write held: a write whose claim token no longer holds its card simply matches no row and
is left out, so the caller refuses it alone. The rows, events and event data are those
of the one-card statements in pg_statements.py (byte for byte), so a batch of one and a
single write leave the same board.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kanban.state.store import Conn

# Only an ungated top-level card with no waiting parent, no reuse key and no notification
# subscription on its board completes here, exactly as pg_statements._COMPLETE decides;
# the others are left to the general path, which tells them apart.
_COMPLETE_MANY = """
WITH given AS MATERIALIZED (
    SELECT * FROM unnest(:ids::integer[], :tokens::text[], :summaries::text[],
                         :actors::text[], :data::text[]) AS g(card_id, token, summary, actor, data)
), done AS (
    UPDATE card SET status = 'done', updated_at = :now, result = g.summary, error = NULL,
        finished_at = :now, claim_token = NULL, lease_expires_at = NULL
    FROM given g
    WHERE card.id = g.card_id AND card.claim_token = g.token AND card.status = 'running'
      AND card.review IS NULL AND card.parent_id IS NULL AND card.key IS NULL
      AND NOT EXISTS (SELECT 1 FROM notify_subscription s WHERE s.board = card.board)
    RETURNING card.id, card.board, g.actor, g.data
), closed AS (
    UPDATE run SET finished_at = :now, outcome = 'completed', error = NULL
    FROM done WHERE run.card_id = done.id AND run.finished_at IS NULL
    RETURNING run.id, run.card_id
), logged AS (
    INSERT INTO event (board, card_id, run_id, kind, actor, data, at)
    SELECT d.board, d.id, (SELECT min(c.id) FROM closed c WHERE c.card_id = d.id), 'complete',
           d.actor, d.data, :now
    FROM done d ORDER BY d.id
), promoted AS (
    UPDATE card SET status = 'ready', updated_at = :now, run_after = :now
    WHERE card.status = 'todo'
      AND card.id IN (SELECT dep.card_id FROM dependency dep JOIN done d
                      ON d.id = dep.depends_on_id)
      AND NOT EXISTS (SELECT 1 FROM dependency dep JOIN card b ON b.id = dep.depends_on_id
                      WHERE dep.card_id = card.id AND b.status <> 'done'
                        AND b.id NOT IN (SELECT id FROM done))
    RETURNING card.id, card.board
), promoted_logged AS (
    INSERT INTO event (board, card_id, run_id, kind, actor, data, at)
    SELECT board, id, NULL, 'promoted', 'system', '{"from": "todo", "to": "ready"}', :now
    FROM promoted ORDER BY id
)
SELECT id FROM done
"""

_RENEW_MANY = """
WITH given AS MATERIALIZED (
    SELECT * FROM unnest(:ids::integer[], :tokens::text[], :runs::integer[],
                         :untils::timestamptz[], :notes::text[], :data::text[])
           AS g(card_id, token, run_id, until, note, data)
), renewed AS (
    UPDATE card SET lease_expires_at = g.until FROM given g
    WHERE card.id = g.card_id AND card.claim_token = g.token AND card.status = 'running'
    RETURNING card.id, card.board, g.token, g.run_id, g.note, g.data
), beat AS (
    UPDATE run SET heartbeat_at = :now, progress = coalesce(r.note, run.progress)
    FROM renewed r
    WHERE run.id = r.run_id AND run.card_id = r.id AND run.claim_token = r.token
), noted AS (
    INSERT INTO event (board, card_id, run_id, kind, actor, data, at)
    SELECT board, id, run_id, 'progress', 'card:#' || id, data, :now FROM renewed
    WHERE note IS NOT NULL ORDER BY id
)
SELECT id FROM renewed
"""

_ACTIVITY_MANY = """
UPDATE run SET activity = g.activity, activity_at = :now
FROM unnest(:ids::integer[], :tokens::text[], :runs::integer[], :activities::text[])
     AS g(card_id, token, run_id, activity)
WHERE run.id = g.run_id AND run.card_id = g.card_id AND run.claim_token = g.token
  AND EXISTS (SELECT 1 FROM card c WHERE c.id = g.card_id AND c.claim_token = g.token
              AND c.status = 'running')
RETURNING run.card_id
"""


def complete_many(conn: Conn, items: Sequence[tuple[int, str, str, str, bool]], *,
                  now: datetime) -> set[int]:
    """(card id, claim token, summary, actor, implicit) each: the cards completed."""
    if not items:
        return set()
    data = [json.dumps({"from": "running", "to": "done", "implicit": implicit},
                       sort_keys=True) for *_, implicit in items]
    return set(conn.column(_COMPLETE_MANY, {
        "now": now, "ids": [i[0] for i in items], "tokens": [i[1] for i in items],
        "summaries": [i[2] for i in items], "actors": [i[3] for i in items], "data": data}))


def renew_many(conn: Conn, items: Sequence[tuple[int, str, int, datetime, str | None]], *,
               now: datetime) -> set[int]:
    """(card id, claim token, run id, new expiry, note) each: the cards renewed."""
    if not items:
        return set()
    return set(conn.column(_RENEW_MANY, {
        "now": now, "ids": [i[0] for i in items], "tokens": [i[1] for i in items],
        "runs": [i[2] for i in items], "untils": [i[3] for i in items],
        "notes": [i[4] for i in items],
        "data": [json.dumps({"note": i[4]}, sort_keys=True) for i in items]}))


def store_activity_many(conn: Conn, items: Sequence[tuple[int, str, int, dict[str, Any]]], *,
                        now: datetime) -> set[int]:
    """(card id, claim token, run id, activity) each: the cards whose activity was stored."""
    if not items:
        return set()
    return set(conn.column(_ACTIVITY_MANY, {
        "now": now, "ids": [i[0] for i in items], "tokens": [i[1] for i in items],
        "runs": [i[2] for i in items],
        "activities": [json.dumps(i[3], ensure_ascii=False) for i in items]}))
