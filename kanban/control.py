"""The spawn-pause flags and the dispatcher registry."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, insert, update

from kanban.cards import require_board
from kanban.events import record_event
from state import rawsql
from state.models import Board, Dispatcher, Setting

setting_t = Setting.__table__
board_t = Board.__table__
dispatcher_t = Dispatcher.__table__
SPAWN_PAUSED = "spawn_paused"
DISPATCHER_STALE_S = 15.0


def get_setting(conn: Connection, key: str) -> str | None:
    row = rawsql.fetchone(conn, "SELECT value FROM setting WHERE key = :key", {"key": key})
    return row[0] if row else None


def set_setting(conn: Connection, key: str, value: str | None) -> None:
    conn.execute(delete(setting_t).where(setting_t.c.key == key))
    if value is not None:
        conn.execute(insert(setting_t), {"key": key, "value": value})


def set_paused(conn: Connection, paused: bool, *, board: str | None, now: datetime,
               actor: str = "user") -> None:
    """Pause or resume spawning, globally or for one board."""
    if board is None:
        set_setting(conn, SPAWN_PAUSED, "1" if paused else None)
    else:
        require_board(conn, board)
        conn.execute(update(board_t).where(board_t.c.name == board).values(paused=paused))
    record_event(conn, board=board or "*", kind="paused" if paused else "resumed", actor=actor,
                 at=now, scope=board or "global")


@dataclass(frozen=True)
class PauseState:
    global_paused: bool
    board_paused: bool

    @property
    def paused(self) -> bool:
        return self.global_paused or self.board_paused


def pause_state(conn: Connection, board: str | None) -> PauseState:
    glob = get_setting(conn, SPAWN_PAUSED) == "1"
    local = False
    if board is not None:
        row = rawsql.fetchone(conn, "SELECT paused FROM board WHERE name = :b", {"b": board})
        local = bool(row and row[0])
    return PauseState(glob, local)


def register_dispatcher(conn: Connection, *, host: str, pid: int, now: datetime,
                        board: str | None = None) -> int:
    return conn.execute(insert(dispatcher_t).returning(dispatcher_t.c.id), {
        "host": host, "pid": pid, "board": board, "started_at": now,
        "heartbeat_at": now}).scalar_one()


def beat_dispatcher(conn: Connection, dispatcher_id: int, now: datetime) -> None:
    conn.execute(update(dispatcher_t).where(dispatcher_t.c.id == dispatcher_id)
                 .values(heartbeat_at=now))


def stop_dispatcher(conn: Connection, dispatcher_id: int, now: datetime) -> None:
    conn.execute(update(dispatcher_t).where(dispatcher_t.c.id == dispatcher_id)
                 .values(stopped_at=now, heartbeat_at=now))


@dataclass(frozen=True)
class DispatcherInfo:
    id: int
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    board: str | None = None

    def serves(self, board: str) -> bool:
        return self.board is None or self.board == board


def live_dispatchers(conn: Connection, now: datetime,
                     stale_s: float = DISPATCHER_STALE_S) -> list[DispatcherInfo]:
    rows = rawsql.fetchall(
        conn, "SELECT id, host, pid, started_at, heartbeat_at, board FROM dispatcher "
              "WHERE stopped_at IS NULL AND heartbeat_at >= :since ORDER BY id",
        {"since": now - timedelta(seconds=stale_s)})
    return [DispatcherInfo(**rawsql.row_dict(_DISPATCHER_FIELDS, row)) for row in rows]


_DISPATCHER_FIELDS = ("id", "host", "pid", "started_at", "heartbeat_at", "board")


def serving_dispatchers(conn: Connection, board: str, now: datetime) -> list[DispatcherInfo]:
    """Live dispatchers that claim cards of `board`."""
    return [d for d in live_dispatchers(conn, now) if d.serves(board)]
