"""Row 1: claim + complete per second through the board API, against raw sqlite3 and huey.

Three contenders on one SQLite file each, every run time-boxed and from a fresh copy:
- kanban: `Kanban.claim(1)` then `Kanban.complete` with the claim token, 1/4/8 processes;
- raw: the library's claim UPDATE … RETURNING (imported), run and event inserts, then the
  statements of a fenced complete (check lease, read card, fenced update, close run, event,
  re-read, dependents), in BEGIN IMMEDIATE transactions on one plain sqlite3 connection:
  the ceiling for these writes on this schema, fixed here so that it does not move with
  the library;
- huey: `SqliteStorage.dequeue` of pre-enqueued messages, 1/4/8 processes.
Afterwards every card must have exactly one run and every huey message one dequeue.
"""

from __future__ import annotations

import multiprocessing
import queue
import secrets
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Sizes, db_time, fill_cards, median, new_board, query
from bench.report import Goal, Row

_PRELOAD = ["kanban.service", "state", "huey.storage", "bench.claims"]


@dataclass(frozen=True)
class Outcome:
    """One time-boxed run: operations done, wall time, double claims, errors."""

    ops: int
    seconds: float
    doubles: int
    errors: tuple[str, ...] = ()

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0


# --- the contenders, each in its own process ------------------------------------------------

def _kanban_loop(path: str, seconds: float, barrier: Any) -> tuple[int, float, float]:
    from kanban.service import Kanban
    from kanban.state import DbLocation, open_database
    from kanban.transitions import Actor

    db = open_database(DbLocation(path, "flag"))
    kb = Kanban(db)
    kb.pause_state()  # connect and warm the pool before the clock starts
    barrier.wait()
    start = time.time()
    done = 0
    while time.time() - start < seconds:
        claimed = kb.claim(1, lease_s=600)
        if not claimed:
            break
        claim = claimed[0]
        kb.complete(claim.card_id, "ok", actor=Actor("bench", claim.claim_token))
        done += 1
    end = time.time()
    db.dispose()
    return done, start, end


_RUN_INSERT = (
    "INSERT INTO run (card_id, attempt, claim_token, dispatcher_id, host, started_at, "
    "heartbeat_at, input_tokens, output_tokens, cached_tokens) "
    "VALUES (?, ?, ?, NULL, NULL, ?, ?, 0, 0, 0) RETURNING id")
_EVENT_INSERT = ("INSERT INTO event (board, card_id, run_id, kind, actor, data, at) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)")
_ASSERT_LEASE = "SELECT id FROM card WHERE id = ? AND claim_token = ? AND status = 'running'"
_GET_CARD = "SELECT * FROM card WHERE id = ?"
_FINISH_CARD = (
    "UPDATE card SET status = 'done', claim_token = NULL, lease_expires_at = NULL, result = ?, "
    "error = NULL, updated_at = ?, finished_at = ? "
    "WHERE id = ? AND status = 'running' AND claim_token = ?")
_CLOSE_RUN = ("UPDATE run SET finished_at = ?, outcome = 'completed', exit_code = NULL, "
              "error = NULL WHERE card_id = ? AND finished_at IS NULL RETURNING id")
_DEPENDENTS = "SELECT card_id FROM dependency WHERE depends_on_id = ?"


def _raw_loop(path: str, seconds: float, barrier: Any) -> tuple[int, float, float]:
    """The claim and complete statements with nothing between them: the ceiling."""
    import sqlite3

    from kanban.claims import _CLAIM_SQLITE

    claim_sql = _CLAIM_SQLITE.format(filters="")
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    for pragma in ("busy_timeout = 30000", "journal_mode = WAL", "synchronous = NORMAL",
                   "foreign_keys = ON"):
        conn.execute(f"PRAGMA {pragma}")
    barrier.wait()
    start = time.time()
    done = 0
    while time.time() - start < seconds:
        now = time.time()
        at, until = db_time(now), db_time(now + 600)
        conn.execute("BEGIN IMMEDIATE")
        cursor = conn.execute(claim_sql, {"now": at, "lease_until": until, "n": 1})
        rows = cursor.fetchall()
        if not rows:
            conn.execute("COMMIT")
            break
        claimed = dict(zip([d[0] for d in cursor.description], rows[0], strict=True))
        card_id, board = claimed["id"], claimed["board"]
        attempt, token = claimed["attempt"], claimed["claim_token"]
        run_id = conn.execute(_RUN_INSERT, (card_id, attempt, token, at, at)).fetchone()[0]
        conn.execute(_EVENT_INSERT, (board, card_id, run_id, "claimed", "dispatcher",
                                     '{"attempt": 1, "from": "ready", "to": "running"}', at))
        conn.execute("COMMIT")
        at = db_time(time.time())
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_ASSERT_LEASE, (card_id, token)).fetchone()
        conn.execute(_GET_CARD, (card_id,)).fetchone()
        conn.execute(_FINISH_CARD, ("ok", at, at, card_id, token))
        conn.execute(_CLOSE_RUN, (at, card_id)).fetchone()
        conn.execute(_EVENT_INSERT, (board, card_id, run_id, "complete", "bench",
                                     '{"from": "running", "implicit": false, "to": "done"}', at))
        conn.execute(_GET_CARD, (card_id,)).fetchone()
        conn.execute(_DEPENDENTS, (card_id,)).fetchall()
        conn.execute("COMMIT")
        done += 1
    end = time.time()
    conn.close()
    return done, start, end


def _huey_loop(path: str, seconds: float, barrier: Any) -> tuple[list[int], float, float]:
    from huey.storage import SqliteStorage

    storage = SqliteStorage(name="bench", filename=path, timeout=30)
    storage.queue_size()  # connect before the clock starts
    barrier.wait()
    start = time.time()
    got: list[int] = []
    while time.time() - start < seconds:
        data = storage.dequeue()
        if data is None:
            break
        got.append(int(data))
    end = time.time()
    storage.close()
    return got, start, end


def _child(kind: str, path: str, seconds: float, barrier: Any, results: Any) -> None:
    try:
        loop = {"kanban": _kanban_loop, "raw": _raw_loop, "huey": _huey_loop}[kind]
        results.put(("ok", *loop(path, seconds, barrier)))
    except BaseException as exc:  # reported to the parent, which counts it
        barrier.abort()
        results.put(("error", f"{type(exc).__name__}: {exc}", 0.0, 0.0))


def _race(kind: str, path: Path, procs: int, seconds: float) -> tuple[list[Any], list[str]]:
    """Run `procs` children that start together; returns their results and errors."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    children = [ctx.Process(target=_child, args=(kind, str(path), seconds, barrier, results))
                for _ in range(procs)]
    for child in children:
        child.start()
    out: list[Any] = []
    deadline = time.monotonic() + 120 + seconds
    while len(out) < procs and time.monotonic() < deadline:
        try:
            out.append(results.get(timeout=0.2))
        except queue.Empty:
            if all(c.exitcode is not None for c in children) and results.empty():
                break  # a child died without reporting (it printed why on stderr)
    for child in children:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join()
    results.close()
    results.join_thread()
    out += [("error", "a claimer process died or hung", 0.0, 0.0)] * (procs - len(out))
    errors = [str(r[1]) for r in out if r[0] == "error"]
    return [r[1:] for r in out if r[0] == "ok"], errors


# --- one run of each contender --------------------------------------------------------------

def run_board(template: Path, work: Path, kind: str, procs: int, seconds: float) -> Outcome:
    path = work / f"{kind}-{procs}-{secrets.token_hex(3)}.db"
    shutil.copyfile(template, path)
    parts, errors = _race(kind, path, procs, seconds)
    ops = sum(p[0] for p in parts)
    wall = (max(p[2] for p in parts) - min(p[1] for p in parts)) if parts else 0.0
    doubles = query(path, "SELECT count(*) FROM (SELECT card_id FROM run GROUP BY card_id "
                          "HAVING count(*) > 1)")[0][0]
    unfinished = query(path, "SELECT count(*) FROM card WHERE status = 'running'")[0][0]
    if unfinished:
        errors.append(f"{unfinished} cards left running")
    _remove(path)
    return Outcome(ops, wall, doubles, tuple(errors))


def run_huey(work: Path, procs: int, seconds: float, messages: int) -> tuple[Outcome, float]:
    """Enqueue `messages`, then dequeue them from `procs` processes; also the enqueue rate."""
    from huey.storage import SqliteStorage

    path = work / f"huey-{procs}-{secrets.token_hex(3)}.db"
    storage = SqliteStorage(name="bench", filename=str(path), timeout=30)
    start = time.perf_counter()
    for i in range(messages):
        storage.enqueue(str(i).encode())
    enqueue_rate = messages / (time.perf_counter() - start)
    storage.close()
    parts, errors = _race("huey", path, procs, seconds)
    seen = Counter(m for p in parts for m in p[0])
    doubles = sum(1 for count in seen.values() if count > 1)
    wall = (max(p[2] for p in parts) - min(p[1] for p in parts)) if parts else 0.0
    _remove(path)
    return Outcome(sum(seen.values()), wall, doubles, tuple(errors)), enqueue_rate


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


# --- the rows -------------------------------------------------------------------------------

def run(sizes: Sizes, work: Path) -> list[Row]:
    work.mkdir(parents=True, exist_ok=True)
    template = work / "template.db"
    new_board(template)
    fill_cards(template, sizes.claim_cards)
    kanban: dict[int, list[Outcome]] = {p: [] for p in sizes.claim_procs}
    huey: dict[int, list[Outcome]] = {p: [] for p in sizes.claim_procs}
    raw: list[Outcome] = []
    enqueue: list[float] = []
    for _ in range(sizes.repeats):  # interleaved, so drift in machine load hits all alike
        raw.append(run_board(template, work, "raw", 1, sizes.claim_seconds))
        for procs in sizes.claim_procs:
            kanban[procs].append(run_board(template, work, "kanban", procs, sizes.claim_seconds))
            outcome, rate = run_huey(work, procs, sizes.claim_seconds, sizes.claim_cards * 2)
            huey[procs].append(outcome)
            enqueue.append(rate)
    return rows(kanban, huey, raw, median(enqueue))


def rows(kanban: dict[int, list[Outcome]], huey: dict[int, list[Outcome]],
         raw: list[Outcome], enqueue_rate: float) -> list[Row]:
    def rate(outcomes: list[Outcome]) -> float:
        return median(o.rate for o in outcomes)

    ceiling = rate(raw)
    out: list[Row] = []
    n = 1
    for procs, outcomes in kanban.items():
        out.append(Row(f"1.{n}", f"claim+complete/s, {_procs(procs)}", "/s",
                       rate(outcomes), ceiling, "raw sqlite3, same SQL, 1 conn",
                       Goal("ratio", ">=", 0.5)))
        n += 1
    for procs, outcomes in kanban.items():
        out.append(Row(f"1.{n}", f"claim+complete/s, {_procs(procs)}, vs huey", "/s",
                       rate(outcomes), rate(huey[procs]),
                       f"huey SqliteStorage dequeue/s, {_procs(procs)}",
                       Goal("ratio", ">=", 2.0)))
        n += 1
    everything = [*raw, *[o for v in kanban.values() for o in v],
                  *[o for v in huey.values() for o in v]]
    kanban_doubles = sum(o.doubles for v in kanban.values() for o in v)
    huey_doubles = sum(o.doubles for v in huey.values() for o in v)
    errors = [e for o in everything for e in o.errors]
    ops = sum(o.ops for v in kanban.values() for o in v)
    note = (f"{ops:,} kanban claims checked: every card has at most one run; huey: each message "
            f"dequeued at most once ({huey_doubles} doubles). huey enqueue rate "
            f"{enqueue_rate:,.0f}/s (one commit each).")
    if errors:
        note += f" ERRORS: {len(errors)}: {errors[0]}"
    out.append(Row(f"1.{n}", "double claims (cards run twice / huey dequeued twice)", "",
                   float(kanban_doubles + len(errors)), float(huey_doubles), "huey",
                   Goal("value", "==", 0), note))
    return out


def _procs(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"
