"""What the benchmarks share: sizes, boards on files, dispatcher processes, waiting, stats."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# Credentials would make the default profile a real model; benchmarks stay offline.
SCRUBBED = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
            "KANBAN_DB")


@dataclass(frozen=True)
class Sizes:
    """How big each benchmark runs; `full`, `quick` and `smoke` below."""

    name: str
    repeats: int
    claim_seconds: float  # time box of one claim/dequeue run
    claim_cards: int  # ready cards (and huey messages) pre-filled per run
    claim_procs: tuple[int, ...]
    latency_warm: int  # cards, one at a time
    latency_cold: int
    e2e_cards: int
    e2e_workers: int
    e2e_serial_cards: int  # the in-process baseline
    memory_warm: int  # slow workers sampled at once
    memory_cold: int
    cli_cards: tuple[int, ...]
    cli_repeats: int
    recovery_repeats: int
    lease_s: float
    scale_cards: tuple[int, int] = (10_000, 1_000_000)  # the small board and the big one
    scale_repeats: int = 15


FULL = Sizes("full", repeats=3, claim_seconds=2.0, claim_cards=6000, claim_procs=(1, 4, 8),
             latency_warm=200, latency_cold=30, e2e_cards=1000, e2e_workers=8,
             e2e_serial_cards=50, memory_warm=8, memory_cold=3,
             cli_cards=(10_000, 100_000), cli_repeats=9, recovery_repeats=3, lease_s=2.0)
QUICK = Sizes("quick", repeats=1, claim_seconds=1.0, claim_cards=1500, claim_procs=(1, 4, 8),
              latency_warm=60, latency_cold=8, e2e_cards=200, e2e_workers=8,
              e2e_serial_cards=30, memory_warm=8, memory_cold=2,
              cli_cards=(10_000, 100_000), cli_repeats=5, recovery_repeats=1, lease_s=2.0,
              scale_cards=(10_000, 200_000), scale_repeats=7)
SMOKE = Sizes("smoke", repeats=1, claim_seconds=0.3, claim_cards=40, claim_procs=(1, 2),
              latency_warm=3, latency_cold=1, e2e_cards=6, e2e_workers=2, e2e_serial_cards=2,
              memory_warm=2, memory_cold=1, cli_cards=(20,), cli_repeats=1,
              recovery_repeats=1, lease_s=1.0, scale_cards=(20, 200), scale_repeats=2)
PROFILES = {s.name: s for s in (FULL, QUICK, SMOKE)}


# --- statistics -----------------------------------------------------------------------------

def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ts(text: str) -> float:
    """A stored UTC timestamp (naive ISO text in SQLite) as epoch seconds."""
    value = datetime.fromisoformat(text)
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def db_time(at: float) -> str:
    """Epoch seconds in the column format the library writes to SQLite."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


# --- boards on files ------------------------------------------------------------------------

def bench_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(extra)
    return env


def new_board(path: Path) -> None:
    """A kanban database with its 'default' board, made through the library."""
    from kanban.service import Kanban
    from kanban.state import DbLocation, open_database

    path.parent.mkdir(parents=True, exist_ok=True)
    db = open_database(DbLocation(str(path), "flag"), create=True)
    try:
        Kanban(db).ensure_board("default")
    finally:
        db.dispose()


@contextmanager
def kanban_at(path: Path) -> Iterator[Any]:
    """The board API over an existing database file."""
    from kanban.service import Kanban
    from kanban.state import DbLocation, open_database

    db = open_database(DbLocation(str(path), "flag"))
    try:
        yield Kanban(db)
    finally:
        db.dispose()


def configure(path: Path, *, lease_s: float | None = None, model: str | None = None) -> None:
    """Write config.toml next to the database."""
    lines = []
    if lease_s is not None:
        lines += ["[limits]", f"lease_s = {lease_s}", ""]
    if model is not None:
        lines += ["[profiles.default]", f"model = {json.dumps(model)}", ""]
    (path.parent / "config.toml").write_text("\n".join(lines))


def write_script(path: Path, steps: list[dict[str, Any]]) -> str:
    """A scripted-model JSON file; returns its model spec."""
    path.write_text(json.dumps(steps))
    return f"scripted:{path}"


def complete_at_once() -> list[dict[str, Any]]:
    """The shortest worker: complete on the first model call."""
    return [{"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "ok"}}]},
            {"text": "done"}]


def slow_steps(delay_s: float, beats: int) -> list[dict[str, Any]]:
    """A worker that stays alive about delay_s * (beats + 1) seconds, then completes."""
    beat = {"tool_calls": [{"name": "kanban_heartbeat", "arguments": {"note": "working"}}],
            "delay_s": delay_s}
    done = {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "slow"}}],
            "delay_s": delay_s}
    return [*([beat] * beats), done, {"text": "done"}]


# The states of a board in use, by share of 100 cards (bench.cli, bench.scale, bench.hermes).
MIX = (("done", 70), ("ready", 15), ("todo", 5), ("blocked", 3), ("failed", 4),
       ("cancelled", 2), ("running", 1))


def status_of(i: int) -> str:
    slot = i % 100
    for status, share in MIX:
        if slot < share:
            return status
        slot -= share
    return "done"


def fill_cards(path: Path, n: int, *, status_of: Callable[[int], str] = lambda i: "ready",
               start_id: int | None = None) -> None:
    """Insert n cards in one transaction with executemany through the library's tables."""
    from kanban.state.timeutil import utcnow

    now = utcnow()
    rows = [{
        "board": "default", "title": f"bench card {i}", "goal": f"goal of card {i}",
        "context": "", "status": status_of(i), "priority": i % 3, "profile": "default",
        "depth": 0, "created_by": "user", "attempt": 0, "max_attempts": 3, "retry_base": 0,
        "run_after": now, "created_at": now, "updated_at": now,
        "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
    } for i in range(n)]
    columns = list(rows[0]) if rows else []
    sql = (f"INSERT INTO card ({', '.join(columns)}) "
           f"VALUES ({', '.join(':' + c for c in columns)})")
    with kanban_at(path) as kb, kb.db.write() as conn:
        conn.many(sql, rows)


def query(path: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


class Reader:
    """One read connection kept open for polling (cheaper than reconnecting)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, timeout=30, isolation_level=None)

    def all(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def one(self, sql: str, *params: object) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        self.conn.close()


def wait_until(predicate: Callable[[], T], *, timeout: float, what: str,
               interval: float = 0.005) -> T:
    """Poll an observable state until it holds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def start_together(start_at: float) -> float:
    """Start together (wall clock: the processes share no monotonic origin); returns when."""
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    return time.time()


# --- dispatchers as processes ---------------------------------------------------------------

class DispatcherProcess:
    """`kanban dispatch` in a subprocess, as a user runs it."""

    def __init__(self, path: Path, *, max_workers: int, cold: bool = False,
                 env: dict[str, str] | None = None) -> None:
        self.path = path
        command = [sys.executable, "-m", "kanban.cli.app", "--db", str(path), "dispatch",
                   "--max-workers", str(max_workers), "--drain-timeout", "0"]
        if cold:
            command.append("--cold")
        self.log = path.parent / ("dispatch-cold.log" if cold else "dispatch.log")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                         env=bench_env(**(env or {})), start_new_session=True)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the dispatcher exited ({self.proc.returncode}); "
                               f"see {self.log}: {self.log.read_text()[-800:]}")

    def stop(self) -> None:
        """SIGTERM (hand running cards back at once), then make sure no worker lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        kill_leftover_workers(self.path)

    def __enter__(self) -> DispatcherProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def kill_leftover_workers(path: Path) -> None:
    """Workers this run started whose runs never finished (each leads its own group)."""
    with suppress(sqlite3.Error):
        for (pid,) in query(path, "SELECT pid FROM run WHERE pid IS NOT NULL "
                                  "AND exit_code IS NULL AND finished_at IS NULL"):
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def add_card(path: Path, title: str) -> int:
    """One card through the library, as `kanban add` would make it."""
    from kanban.cards import NewCard

    with kanban_at(path) as kb:
        return kb.add_card(NewCard(title=title, goal=f"the goal of {title}")).id


def card_settled(reader: Reader, card_id: int) -> bool:
    """Done, and its worker reaped by the dispatcher (the dispatcher is idle again)."""
    row = reader.all("SELECT c.status, r.exit_code FROM card c JOIN run r ON r.card_id = c.id "
                     "WHERE c.id = ? ORDER BY r.id DESC LIMIT 1", card_id)
    return bool(row) and row[0][0] == "done" and row[0][1] is not None


def warm_up(path: Path, dispatcher: DispatcherProcess, *, timeout: float = 60) -> None:
    """One card through the dispatcher so its forkserver and caches are up before timing."""
    reader = Reader(path)
    try:
        card_id = add_card(path, "warm-up")

        def settled() -> bool:
            dispatcher.check_alive()
            return card_settled(reader, card_id)

        wait_until(settled, timeout=timeout, what="the warm-up card", interval=0.02)
    finally:
        reader.close()


def rollup_kib(pid: int | str, field: str) -> int | None:
    """One field of /proc/PID/smaps_rollup in KiB (`pid` "self": this process); None
    when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def pss_kib(pid: int) -> int | None:
    """Proportional set size of one process."""
    return rollup_kib(pid, "Pss")
