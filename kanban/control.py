"""The spawn-pause flags and the dispatcher registry."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from kanban.cards import require_board
from kanban.events import record_event
from kanban.state.host import boot_id, hostname, process_start
from kanban.state.plans import Plan, Query, run_plan
from kanban.state.rows import row_dict
from kanban.state.store import Conn, Database

SPAWN_PAUSED = "spawn_paused"
DISPATCHER_STALE_S = 15.0


def get_setting(conn: Conn, key: str) -> str | None:
    row = conn.one("SELECT value FROM setting WHERE key = :key", {"key": key})
    return row[0] if row else None


def set_setting(conn: Conn, key: str, value: str | None) -> None:
    conn.run("DELETE FROM setting WHERE key = :key", {"key": key})
    if value is not None:
        conn.run("INSERT INTO setting (key, value) VALUES (:key, :value)",
                 {"key": key, "value": value})


def set_paused(conn: Conn, paused: bool, *, board: str | None, now: datetime,
               actor: str = "user") -> None:
    """Pause or resume spawning, globally or for one board."""
    if board is None:
        set_setting(conn, SPAWN_PAUSED, "1" if paused else None)
    else:
        require_board(conn, board)
        conn.run("UPDATE board SET paused = :paused WHERE name = :board",
                 {"paused": paused, "board": board})
    record_event(conn, board=board or "*", kind="paused" if paused else "resumed", actor=actor,
                 at=now, scope=board or "global")


@dataclass(frozen=True)
class PauseState:
    global_paused: bool
    board_paused: bool

    @property
    def paused(self) -> bool:
        return self.global_paused or self.board_paused


def pause_state(conn: Conn, board: str | None) -> PauseState:
    return run_plan(conn, pause_state_plan(board))


def pause_state_plan(board: str | None) -> Plan[PauseState]:
    rows = yield Query("SELECT value FROM setting WHERE key = :key", {"key": SPAWN_PAUSED})
    local = False
    if board is not None:
        row = yield Query("SELECT paused FROM board WHERE name = :b", {"b": board})
        local = bool(row and row[0][0])
    return PauseState(rows.scalar() == "1", local)


def register_dispatcher(conn: Conn, *, host: str, pid: int, now: datetime,
                        board: str | None = None, instance: str | None = None,
                        boot_id: str | None = None, booted_at: datetime | None = None) -> int:
    """A row for this dispatcher instance (random `instance`, host boot); returns its id."""
    return int(conn.scalar(
        "INSERT INTO dispatcher (host, pid, board, started_at, heartbeat_at, instance, boot_id, "
        "booted_at) VALUES (:host, :pid, :board, :now, :now, :instance, :boot_id, :booted_at) "
        "RETURNING id",
        {"host": host, "pid": pid, "board": board, "now": now, "instance": instance,
         "boot_id": boot_id, "booted_at": booted_at}))


BREAKER = "breaker:"  # setting key prefix: a dispatcher's open circuit breaker


def set_breaker(conn: Conn, dispatcher_id: int, reason: str | None, now: datetime) -> None:
    """Record the dispatcher's circuit breaker: open with `reason`, or closed (None)."""
    value = None if reason is None else json.dumps({"reason": reason, "at": now.isoformat()})
    set_setting(conn, f"{BREAKER}{dispatcher_id}", value)


SANDBOX = "sandbox:"  # setting key prefix: how a dispatcher's workers run commands


def set_sandbox(conn: Conn, dispatcher_id: int, note: str | None) -> None:
    """Record what sandbox this dispatcher's host gives commands (None: forget it)."""
    set_setting(conn, f"{SANDBOX}{dispatcher_id}", note)


def sandbox_notes(conn: Conn, dispatcher_ids: Iterable[int]) -> dict[int, str]:
    wanted = {f"{SANDBOX}{i}": i for i in dispatcher_ids}
    if not wanted:
        return {}
    rows = conn.all(f"SELECT key, value FROM setting WHERE key LIKE '{SANDBOX}%'")
    return {wanted[key]: value for key, value in rows if key in wanted}


def beat_dispatcher(conn: Conn, dispatcher_id: int, now: datetime) -> None:
    conn.run("UPDATE dispatcher SET heartbeat_at = :now WHERE id = :id",
             {"now": now, "id": dispatcher_id})


def stop_dispatcher(conn: Conn, dispatcher_id: int, now: datetime) -> None:
    conn.run("UPDATE dispatcher SET stopped_at = :now, heartbeat_at = :now WHERE id = :id",
             {"now": now, "id": dispatcher_id})
    set_sandbox(conn, dispatcher_id, None)


@dataclass(frozen=True)
class DispatcherInfo:
    id: int
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    board: str | None = None
    instance: str | None = None
    boot_id: str | None = None
    stopped_at: datetime | None = None
    breaker_json: str | None = None  # its open circuit breaker, as set_breaker stored it

    @property
    def breaker(self) -> tuple[str, datetime] | None:
        """(why, since when) while its circuit breaker is open."""
        if self.breaker_json is None:
            return None
        data = json.loads(self.breaker_json)
        return str(data["reason"]), datetime.fromisoformat(data["at"])

    def serves(self, board: str) -> bool:
        return self.board is None or self.board == board

    def alive(self, now: datetime, stale_s: float = DISPATCHER_STALE_S) -> bool:
        """The one test of a live dispatcher: not stopped, heartbeating lately, and, where
        this host can tell (same host, same boot), its process still there."""
        return (self.stopped_at is None and self.heartbeat_at >= now - timedelta(seconds=stale_s)
                and not self.provably_dead())

    def provably_dead(self) -> bool:
        """Stopped, or its row names a process of this host's current boot that is gone (a pid
        reused within the heartbeat's staleness window is not worth the wall-clock guess)."""
        if self.stopped_at is not None:
            return True
        if self.boot_id is None or self.host != hostname() or \
                self.boot_id != boot_id():
            return False
        return process_start(self.pid) is None


_DISPATCHER_FIELDS = ("id", "host", "pid", "started_at", "heartbeat_at", "board", "instance",
                      "boot_id", "stopped_at", "breaker_json")
_SELECT_DISPATCHER = (  # its breaker, if open, from the setting table
    f"SELECT {', '.join(f'dispatcher.{c}' for c in _DISPATCHER_FIELDS[:-1])}, breaker.value "
    f"FROM dispatcher LEFT JOIN setting breaker ON breaker.key = '{BREAKER}' || dispatcher.id")


def shared_network_board(db: Database, host: str, now: datetime) -> str | None:
    """Why this host must not use the board, if it sits on a network filesystem that a live
    dispatcher of another host uses (SQLite's locks do not hold between hosts there)."""
    remote = getattr(getattr(db, "journal", None), "network_fs", None)
    if remote is None or db.journal_warning() is None:
        return None
    with db.read() as conn:
        others = [d for d in live_dispatchers(conn, now) if d.host != host]
    if not others:
        return None
    return (f"the board is on a network filesystem ({remote}) and dispatcher {others[0].id} "
            f"on {others[0].host} uses it: SQLite cannot be shared by several hosts there; "
            "move the board to PostgreSQL")


def live_dispatchers(conn: Conn, now: datetime,
                     stale_s: float = DISPATCHER_STALE_S) -> list[DispatcherInfo]:
    return run_plan(conn, live_dispatchers_plan(now, stale_s))


def live_dispatchers_plan(now: datetime, stale_s: float = DISPATCHER_STALE_S
                          ) -> Plan[list[DispatcherInfo]]:
    rows = yield Query(f"{_SELECT_DISPATCHER} WHERE stopped_at IS NULL AND "
                       "heartbeat_at >= :since ORDER BY id",
                       {"since": now - timedelta(seconds=stale_s)})
    found = (DispatcherInfo(**row_dict(_DISPATCHER_FIELDS, row)) for row in rows)
    return [d for d in found if d.alive(now, stale_s)]


def dispatchers_by_id(conn: Conn, ids: Iterable[int]) -> dict[int, DispatcherInfo]:
    """The rows of these dispatchers, live or dead."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    marks = ", ".join(f":d{i}" for i in range(len(wanted)))
    rows = conn.all(f"{_SELECT_DISPATCHER} WHERE id IN ({marks})",
                    {f"d{i}": value for i, value in enumerate(wanted)})
    return {row[0]: DispatcherInfo(**row_dict(_DISPATCHER_FIELDS, row)) for row in rows}


def serving_dispatchers(conn: Conn, board: str, now: datetime) -> list[DispatcherInfo]:
    """Live dispatchers that claim cards of `board`."""
    return [d for d in live_dispatchers(conn, now) if d.serves(board)]
