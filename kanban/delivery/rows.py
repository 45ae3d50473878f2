"""The life of a delivery row, the same in every queue (`cron_delivery`, `notify_outbox`).

A row is `pending` until an attempt is due, `sending` while one process holds it (a lease,
so a crashed sender's row is taken again), then `delivered`, or `failed` once its attempts
are spent (kept, shown, and queued again by a redeliver command).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from kanban.state.store import Conn

TABLES = frozenset({"cron_delivery", "notify_outbox"})


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    FAILED = "failed"


def _table(name: str) -> str:
    assert name in TABLES, name  # never a value from outside: it is spliced into SQL
    return name


def claim(conn: Conn, table: str, row_id: int, attempts: int, *, now: datetime,
          lease_s: float) -> bool:
    """Take one due row for one attempt; False if another sender took it first."""
    taken = conn.run(
        f"UPDATE {_table(table)} SET status = 'sending', attempts = attempts + 1, "
        "lease_expires_at = :lease, updated_at = :now WHERE id = :id AND attempts = :attempts "
        "AND (status = 'pending' OR (status = 'sending' AND lease_expires_at < :now))",
        {"id": row_id, "attempts": attempts, "now": now,
         "lease": now + timedelta(seconds=lease_s)})
    return taken == 1


def settle(conn: Conn, table: str, row_id: int, attempt: int, *, status: DeliveryStatus,
           error: str | None, next_attempt_at: datetime, now: datetime) -> bool:
    """Record how our attempt went, unless our lease ran out and another sender took over."""
    changed = conn.run(
        f"UPDATE {_table(table)} SET status = :status, last_error = :error, "
        "lease_expires_at = NULL, next_attempt_at = :next, updated_at = :now, "
        "delivered_at = :delivered WHERE id = :id AND attempts = :attempt AND status = 'sending'",
        {"status": str(status), "error": error, "next": next_attempt_at, "now": now,
         "delivered": now if status is DeliveryStatus.DELIVERED else None,
         "id": row_id, "attempt": attempt})
    return changed == 1
