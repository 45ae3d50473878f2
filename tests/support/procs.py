"""Driving the real `kanban` CLI and dispatchers as subprocesses, and waiting for states."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
KANBAN = [sys.executable, "-m", "kanban.cli"]  # the console script's entry (kanban.cli.entry)
# How long a state may take to come about on a machine busy with other work (the suite runs
# in several processes; a loaded host slows a card's seconds of CPU tenfold). Only a bound:
# a passing test never waits it out.
PATIENT_S = 180


def kanban(db: Path, *args: str, env: Mapping[str, str] | None = None,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*KANBAN, "--db", str(db), *args], capture_output=True, text=True,
                          env=dict(env or os.environ), timeout=PATIENT_S)
    if check and proc.returncode != 0:
        raise AssertionError(f"kanban {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def start_dispatcher(db: Path, *args: str, env: Mapping[str, str] | None = None,
                     log: Path | None = None) -> subprocess.Popen[bytes]:
    command = [*KANBAN, "--db", str(db), "dispatch", *args]
    if log is None:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                env=dict(env or os.environ))
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                env=dict(env or os.environ))


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM a dispatcher and wait for its graceful exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


def wait_until(predicate: Callable[[], T], *, timeout: float, what: str,
               interval: float = 0.05, explain: Callable[[], str] = lambda: "") -> T:
    """Poll an observable state until it holds (never a fixed sleep); `explain` adds what to
    look at (a log's tail, the board's states) to a failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{explain()}")
        time.sleep(interval)


def wait_for_count(count: Callable[[], int], target: int, *, stall_s: float, what: str,
                   interval: float = 0.5, explain: Callable[[], str] = lambda: "") -> None:
    """Poll a growing count until it reaches `target`; fail only when it stops growing for
    `stall_s`. A fleet on a loaded machine may be slow, and that is not a fault; a count that
    stands still is. `explain` adds what to look at (logs, states) to the failure."""
    best, since = -1, time.monotonic()
    while True:
        value = count()
        if value >= target:
            return
        if value > best:
            best, since = value, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise AssertionError(f"{what}: stuck at {value} of {target} for {stall_s:g}s\n"
                                 f"{explain()}")
        time.sleep(interval)


def query(db: Path, sql: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def counts(db: Path) -> dict[str, int]:
    return dict(query(db, "SELECT status, count(*) FROM card GROUP BY status"))
