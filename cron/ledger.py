"""Every query over `cron_fire` (a job's history) and `cron_delivery` (results on their way).

A delivery row is `pending` until its card is finished and an attempt is due, `sending` while
one process holds it (a lease, so a crashed sender's row is picked up again), then
`delivered`, or `failed` once its attempts are spent (kept, shown, and re-queued by
`kanban cron redeliver`). Reads join `card` for the state and result of a fire's card.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kanban.cron.jobs import iso
from kanban.delivery import rows
from kanban.delivery.rows import DeliveryStatus
from kanban.state.rows import as_time, with_times
from kanban.state.store import Conn

TABLE = "cron_delivery"
FINISHED = ("done", "failed", "cancelled")
_FINISHED_SQL = "('done', 'failed', 'cancelled')"


@dataclass(frozen=True)
class Fire:
    """One line of a job's history."""

    job_id: int
    job: str
    board: str
    outcome: str  # fired, skipped, missed, failed
    manual: bool
    slots: int
    scheduled_at: datetime | None
    fired_at: datetime
    card_id: int | None = None
    reason: str | None = None


def insert_fire(conn: Conn, fire: Fire) -> int:
    return int(conn.scalar(
        "INSERT INTO cron_fire (job_id, job, board, card_id, outcome, manual, slots, "
        "scheduled_at, fired_at, reason) VALUES (:job_id, :job, :board, :card_id, :outcome, "
        ":manual, :slots, :scheduled_at, :fired_at, :reason) RETURNING id", {
            "job_id": fire.job_id, "job": fire.job, "board": fire.board,
            "card_id": fire.card_id, "outcome": fire.outcome, "manual": fire.manual,
            "slots": fire.slots, "scheduled_at": fire.scheduled_at, "fired_at": fire.fired_at,
            "reason": fire.reason}))


def insert_delivery(conn: Conn, *, fire_id: int, job: str, card_id: int, target: str,
                    now: datetime) -> int:
    return int(conn.scalar(
        "INSERT INTO cron_delivery (fire_id, job, card_id, target, status, attempts, "
        "next_attempt_at, created_at, updated_at) VALUES (:fire_id, :job, :card_id, :target, "
        "'pending', 0, :now, :now, :now) RETURNING id",
        {"fire_id": fire_id, "job": job, "card_id": card_id, "target": target, "now": now}))


# -- history ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryRecord:
    id: int
    fire_id: int
    job: str
    card_id: int
    target: str
    status: str
    attempts: int
    last_error: str | None
    next_attempt_at: datetime
    created_at: datetime
    delivered_at: datetime | None
    card_finished: bool = True

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DeliveryRecord:
        row = with_times(row)
        return cls(row["id"], row["fire_id"], row["job"], row["card_id"], row["target"],
                   row["status"], row["attempts"], row["last_error"], row["next_attempt_at"],
                   row["created_at"], row["delivered_at"], row["card_status"] in FINISHED)

    @property
    def state(self) -> str:
        """What a person reads: 'waiting for the card' before there is anything to send."""
        if self.status == DeliveryStatus.PENDING and not self.card_finished:
            return "waiting"
        return self.status

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "fire_id": self.fire_id, "job": self.job,
                "card_id": self.card_id, "target": self.target, "status": self.state,
                "attempts": self.attempts, "last_error": self.last_error,
                "next_attempt_at": iso(self.next_attempt_at) if self.status in (
                    DeliveryStatus.PENDING, DeliveryStatus.SENDING) else None,
                "created_at": iso(self.created_at), "delivered_at": iso(self.delivered_at)}


@dataclass(frozen=True)
class FireRecord:
    """A fire with what became of its card and its deliveries."""

    id: int
    outcome: str
    manual: bool
    slots: int
    scheduled_at: datetime | None
    fired_at: datetime
    reason: str | None
    card_id: int | None
    card_status: str | None
    attempt: int | None
    started_at: datetime | None
    finished_at: datetime | None
    input_tokens: int | None
    output_tokens: int | None
    result: str | None
    error: str | None
    deliveries: tuple[DeliveryRecord, ...] = ()

    @property
    def duration_s(self) -> float | None:
        """How long the card's last attempt ran."""
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, (self.finished_at - self.started_at).total_seconds())

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "outcome": self.outcome, "manual": self.manual,
                "slots": self.slots, "scheduled_at": iso(self.scheduled_at),
                "fired_at": iso(self.fired_at), "reason": self.reason, "card_id": self.card_id,
                "card_status": self.card_status, "attempts": self.attempt,
                "duration_s": self.duration_s, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "result": self.result,
                "error": self.error, "deliveries": [d.to_json() for d in self.deliveries]}


_FIRES = """
SELECT f.id, f.outcome, f.manual, f.slots, f.scheduled_at, f.fired_at, f.reason, f.card_id,
       c.status AS card_status, c.attempt, c.started_at, c.finished_at, c.input_tokens,
       c.output_tokens, c.result, c.error
FROM cron_fire f LEFT JOIN card c ON c.id = f.card_id
WHERE f.job_id = :job_id ORDER BY f.id DESC LIMIT :limit
"""
_DELIVERIES = """
SELECT d.*, c.status AS card_status FROM cron_delivery d JOIN card c ON c.id = d.card_id
WHERE {where} ORDER BY d.id
"""


def fires_of(conn: Conn, job_id: int, *, limit: int) -> list[FireRecord]:
    """The job's newest fires first, each with its deliveries."""
    rows = [with_times(r) for r in conn.maps(_FIRES, {"job_id": job_id, "limit": limit})]
    by_fire: dict[int, list[DeliveryRecord]] = {}
    if rows:
        marks = ", ".join(f":f{n}" for n in range(len(rows)))
        found = conn.maps(_DELIVERIES.format(where=f"d.fire_id IN ({marks})"),
                          {f"f{n}": row["id"] for n, row in enumerate(rows)})
        for delivery in map(DeliveryRecord.from_row, found):
            by_fire.setdefault(delivery.fire_id, []).append(delivery)
    return [FireRecord(**{**row, "manual": bool(row["manual"])},
                       deliveries=tuple(by_fire.get(row["id"], ()))) for row in rows]


def deliveries_of(conn: Conn, job: str, *, unsettled_only: bool = False,
                  limit: int = 50) -> list[DeliveryRecord]:
    """A job's newest deliveries (or those not yet delivered), oldest first."""
    where = "d.job = :job" + (" AND d.status <> 'delivered'" if unsettled_only else "")
    sql = _DELIVERIES.format(where=where).replace("ORDER BY d.id", "ORDER BY d.id DESC LIMIT :n")
    return list(reversed([DeliveryRecord.from_row(r)
                          for r in conn.maps(sql, {"job": job, "n": limit})]))


def delivery(conn: Conn, delivery_id: int) -> DeliveryRecord | None:
    rows = conn.maps(_DELIVERIES.format(where="d.id = :id"), {"id": delivery_id})
    return DeliveryRecord.from_row(rows[0]) if rows else None


def fire_times(conn: Conn, fire_id: int) -> tuple[datetime, datetime | None]:
    """(fired at, scheduled slot) of one fire."""
    row = conn.one("SELECT fired_at, scheduled_at FROM cron_fire WHERE id = :id", {"id": fire_id})
    assert row is not None, f"no cron fire {fire_id}"
    return as_time(row[0]), as_time(row[1])  # type: ignore[return-value]


def latest_result(conn: Conn, job_id: int) -> tuple[int, str, datetime] | None:
    """(card id, result, finished at) of the job's newest done card."""
    row = conn.one(
        "SELECT c.id, c.result, c.finished_at FROM cron_fire f JOIN card c ON c.id = f.card_id "
        "WHERE f.job_id = :job_id AND c.status = 'done' "
        "ORDER BY c.finished_at DESC, c.id DESC LIMIT 1", {"job_id": job_id})
    if row is None:
        return None
    return int(row[0]), str(row[1] or ""), as_time(row[2])  # type: ignore[return-value]


# -- sending ------------------------------------------------------------------------------


def due_deliveries(conn: Conn, now: datetime, *, limit: int) -> list[tuple[int, int]]:
    """(id, attempts) of the deliveries that are due (see `due_to_targets`)."""
    return [(row_id, attempts) for row_id, attempts, _ in due_to_targets(conn, now, limit=limit)]


def due_to_targets(conn: Conn, now: datetime, *, limit: int,
                   exclude: Collection[str] = ()) -> list[tuple[int, int, str]]:
    """(id, attempts, target) of deliveries whose card is finished and whose attempt is due,
    including those a crashed sender left `sending` past its lease; none to `exclude`."""
    marks = {f"x{n}": target for n, target in enumerate(exclude)}
    skip = f"AND d.target NOT IN ({', '.join(':' + m for m in marks)}) " if marks else ""
    rows_ = conn.all(
        "SELECT d.id, d.attempts, d.target FROM cron_delivery d JOIN card c ON c.id = d.card_id "
        "WHERE d.status IN ('pending', 'sending') AND d.next_attempt_at <= :now "
        f"AND (d.status = 'pending' OR d.lease_expires_at < :now) {skip}"
        f"AND c.status IN {_FINISHED_SQL} ORDER BY d.next_attempt_at, d.id LIMIT :limit",
        {"now": now, "limit": limit, **marks})
    return [(int(i), int(n), str(t)) for i, n, t in rows_]


def claim_delivery(conn: Conn, delivery_id: int, attempts: int, *, now: datetime,
                   lease_s: float) -> bool:
    """Take one due delivery for one attempt; False if another sender took it first."""
    return rows.claim(conn, TABLE, delivery_id, attempts, now=now, lease_s=lease_s)


def settle_delivery(conn: Conn, delivery_id: int, attempt: int, *, status: DeliveryStatus,
                    error: str | None, next_attempt_at: datetime, now: datetime) -> bool:
    """Record how our attempt went, unless our lease ran out and another sender took over."""
    return rows.settle(conn, TABLE, delivery_id, attempt, status=status, error=error,
                       next_attempt_at=next_attempt_at, now=now)


def requeue_failed(conn: Conn, job: str, *, now: datetime) -> list[int]:
    """`kanban cron redeliver`: failed deliveries of a job go back to pending."""
    ids = [int(i) for i in conn.column(
        "SELECT id FROM cron_delivery WHERE job = :job AND status = 'failed' ORDER BY id",
        {"job": job})]
    for delivery_id in ids:
        conn.run("UPDATE cron_delivery SET status = 'pending', attempts = 0, "
                 "next_attempt_at = :now, updated_at = :now WHERE id = :id",
                 {"now": now, "id": delivery_id})
    return ids
