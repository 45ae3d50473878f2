"""Read models for the board view and `kanban status`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, select

from kanban.cards import require_board
from kanban.control import DispatcherInfo, PauseState, live_dispatchers, pause_state
from kanban.states import CardStatus
from state import rawsql
from state.models import Card, Run

card_t = Card.__table__
run_t = Run.__table__

BOARD_ORDER = (
    CardStatus.TODO, CardStatus.READY, CardStatus.RUNNING, CardStatus.BLOCKED, CardStatus.DONE,
    CardStatus.FAILED, CardStatus.CANCELLED,
)


@dataclass(frozen=True)
class BoardCard:
    """The few fields a board column shows."""

    id: int
    title: str
    priority: int
    status: str
    created_by: str
    created_at: datetime
    updated_at: datetime
    attempt: int
    heartbeat_at: datetime | None = None
    progress: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id, "title": self.title, "priority": self.priority,
            "status": self.status, "created_by": self.created_by,
            "created_at": self.created_at.isoformat(), "updated_at": self.updated_at.isoformat(),
            "attempt": self.attempt,
            "heartbeat_at": self.heartbeat_at.isoformat() if self.heartbeat_at else None,
            "progress": self.progress,
        }


@dataclass(frozen=True)
class BoardSnapshot:
    board: str
    counts: dict[str, int]
    columns: dict[str, list[BoardCard]]
    pause: PauseState
    dispatchers: list[DispatcherInfo] = field(default_factory=list)
    at: datetime | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "board": self.board,
            "paused": self.pause.paused,
            "paused_globally": self.pause.global_paused,
            "dispatchers": [
                {"id": d.id, "host": d.host, "pid": d.pid,
                 "heartbeat_at": d.heartbeat_at.isoformat()} for d in self.dispatchers
            ],
            "counts": self.counts,
            "columns": {k: [c.to_json() for c in v] for k, v in self.columns.items()},
        }


def status_counts(conn: Connection, board: str | None = None) -> dict[str, int]:
    where = "archived_at IS NULL" + (" AND board = :board" if board is not None else "")
    rows = rawsql.fetchall(conn, f"SELECT status, count(*) FROM card WHERE {where} "
                                 "GROUP BY status", {"board": board})
    counts = {str(s): 0 for s in BOARD_ORDER}
    counts.update({status: n for status, n in rows})
    return counts


def board_snapshot(conn: Connection, board: str, *, now: datetime,
                   per_column: int = 20) -> BoardSnapshot:
    """Counts of every column and its first `per_column` cards (priority, then age)."""
    require_board(conn, board)
    counts = status_counts(conn, board)
    columns = {str(s): _column(conn, board, s, per_column) if counts[s] else []
               for s in BOARD_ORDER}
    return BoardSnapshot(board, counts, columns, pause_state(conn, board),
                         live_dispatchers(conn, now), now)


_COLUMN_SQL = """
SELECT c.id, c.title, c.priority, c.status, c.created_by, c.created_at, c.updated_at,
       c.attempt, r.heartbeat_at, r.progress
FROM card c LEFT JOIN run r ON r.card_id = c.id AND r.claim_token = c.claim_token
WHERE c.board = :board AND c.status = :status AND c.archived_at IS NULL
ORDER BY {order} LIMIT :limit
"""
_FIELDS = ("id", "title", "priority", "status", "created_by", "created_at", "updated_at",
           "attempt", "heartbeat_at", "progress")


def _column(conn: Connection, board: str, status: CardStatus, limit: int) -> list[BoardCard]:
    finished = status in (CardStatus.DONE, CardStatus.FAILED, CardStatus.CANCELLED)
    order = "c.updated_at DESC, c.id DESC" if finished else "c.priority DESC, c.id"
    rows = rawsql.fetchall(conn, _COLUMN_SQL.format(order=order),
                           {"board": board, "status": status, "limit": limit})
    return [BoardCard(**rawsql.row_dict(_FIELDS, row)) for row in rows]


@dataclass(frozen=True)
class LiveWorker:
    """A running card's worker as recorded on its run."""

    card_id: int
    board: str
    title: str
    attempt: int
    pid: int | None
    host: str | None
    started_at: datetime
    heartbeat_at: datetime | None
    progress: str | None

    def to_json(self, now: datetime) -> dict[str, object]:
        return {
            "card_id": self.card_id, "board": self.board, "title": self.title,
            "attempt": self.attempt, "pid": self.pid, "host": self.host,
            "started_at": self.started_at.isoformat(),
            "runtime_s": round((now - self.started_at).total_seconds(), 1),
            "heartbeat_age_s": (round((now - self.heartbeat_at).total_seconds(), 1)
                                if self.heartbeat_at else None),
            "progress": self.progress,
        }


def live_workers(conn: Connection, *, board: str | None = None) -> list[LiveWorker]:
    query = (
        select(card_t.c.id, card_t.c.board, card_t.c.title, card_t.c.attempt, run_t.c.pid,
               run_t.c.host, run_t.c.started_at, run_t.c.heartbeat_at, run_t.c.progress)
        .join(run_t, (run_t.c.card_id == card_t.c.id)
              & (run_t.c.claim_token == card_t.c.claim_token))
        .where(card_t.c.status == CardStatus.RUNNING)
        .order_by(card_t.c.id)
    )
    if board is not None:
        query = query.where(card_t.c.board == board)
    return [LiveWorker(*row) for row in conn.execute(query).all()]
