"""The append-only event log; every state change writes one in its transaction."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kanban.state.store import Conn

_INSERT = ("INSERT INTO event (board, card_id, run_id, kind, actor, data, at) "
           "VALUES (:board, :card_id, :run_id, :kind, :actor, :data, :at)")


def record_event(
    conn: Conn,
    *,
    board: str,
    kind: str,
    actor: str,
    at: datetime,
    card_id: int | None = None,
    run_id: int | None = None,
    **data: Any,
) -> None:
    conn.run(_INSERT, {
        "board": board, "card_id": card_id, "run_id": run_id, "kind": kind, "actor": actor,
        "data": json.dumps(data, default=str, sort_keys=True), "at": at,
    })


def status_change(frm: str, to: str, **extra: Any) -> dict[str, Any]:
    """The data of an event that moves a card between states (replayable)."""
    return {"from": frm, "to": to, **extra}
