"""What a running worker is doing now, written to its run (shown by the board, `kanban
show` and `kanban run`); fenced by the card's claim token like every worker write."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kanban.errors import LeaseLost
from kanban.state.store import Conn, Database


def record_activity(conn: Conn, run_id: int, card_id: int, claim_token: str,
                    activity: dict[str, Any], *, now: datetime) -> bool:
    """What a running worker is doing now (shown by the board, `show` and `run`); False
    when the run is not this card's under this claim token (nothing stored)."""
    return conn.run(
        "UPDATE run SET activity = :activity, activity_at = :now WHERE id = :run_id "
        "AND card_id = :card_id AND claim_token = :token",
        {"activity": json.dumps(activity, ensure_ascii=False), "now": now,
         "run_id": run_id, "card_id": card_id, "token": claim_token}) == 1


_STORE_ACTIVITY = """
UPDATE run SET activity = :activity, activity_at = :now
WHERE id = :run_id AND card_id = :card_id AND claim_token = :token
  AND EXISTS (SELECT 1 FROM card WHERE id = :card_id AND claim_token = :token
              AND status = 'running')
"""


def store_activity(db: Database, run_id: int, card_id: int, claim_token: str,
                   activity: dict[str, Any], *, now: datetime) -> None:
    """`record_activity` fenced by the card's lease, as one statement (`write_one`): a
    streaming fleet's most frequent write holds SQLite's lock for that statement alone.
    LeaseLost when the claim no longer holds the card."""
    if not db.write_one(_STORE_ACTIVITY, {
            "activity": json.dumps(activity, ensure_ascii=False), "now": now,
            "run_id": run_id, "card_id": card_id, "token": claim_token}):
        raise LeaseLost(f"lease on #{card_id} was lost; this worker must stop")
