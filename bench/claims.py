"""Row 1: claim + complete per second through the board API, against raw sqlite3 and huey.

Contenders on one SQLite file each (same schema, WAL, synchronous=NORMAL), every run
time-boxed and from a fresh copy:
- kanban: `Kanban.claim(1)` (the dispatcher's claim), then the worker's completion
  (`transitions.complete` with the claim token in one write transaction, as the
  `kanban_complete` tool runs it), 1/4/8 processes;
- kanban with 8 slots (bench.dispatch_cycles): one transaction claims 8 cards, as a
  dispatcher with 8 free slots does, and this process group-commits their 8 completions
  (a fleet's workers commit one each), 1/4/8 processes;
- raw, two transactions: the minimal logical work in plain sqlite3, one transaction per
  claim (take the best ready card, its run row, its event) and one per complete (fenced
  update, close the run, its event, look for dependents): the floor;
- raw, one transaction: the same statements in a single transaction per cycle;
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
from bench.dispatch_cycles import SLOTS, dispatcher_cycles
from bench.report import Goal, Row

_PRELOAD = ["kanban.service", "kanban.group_commit", "state", "huey.storage", "bench.claims"]


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
    from kanban import transitions
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
        with db.write() as conn:
            transitions.complete(conn, claim.card_id, "ok", now=kb.clock(),
                                 actor=Actor("bench", claim.claim_token))
        done += 1
    end = time.time()
    db.dispose()
    return done, start, end


def _kanban_slots_loop(path: str, seconds: float, barrier: Any) -> tuple[int, float, float]:
    def start() -> float:
        barrier.wait()
        return time.time()

    return dispatcher_cycles(path, seconds, start=start)


# The floor: the same logical work, each statement as plain as it can be.
_RAW_CLAIM = (
    "UPDATE card SET status = 'running', claim_token = ?, attempt = attempt + 1, "
    "lease_expires_at = ?, started_at = ?, updated_at = ? WHERE id = (SELECT id FROM card "
    "WHERE status = 'ready' AND run_after <= ? ORDER BY priority DESC, id LIMIT 1) "
    "RETURNING id, board, attempt")
_RAW_RUN = (
    "INSERT INTO run (card_id, attempt, claim_token, started_at, heartbeat_at, "
    "input_tokens, output_tokens, cached_tokens) VALUES (?, ?, ?, ?, ?, 0, 0, 0)")
_RAW_EVENT = ("INSERT INTO event (board, card_id, run_id, kind, actor, data, at) "
              "VALUES (?, ?, ?, ?, ?, ?, ?)")
_RAW_FINISH = (
    "UPDATE card SET status = 'done', claim_token = NULL, lease_expires_at = NULL, result = ?, "
    "updated_at = ?, finished_at = ? WHERE id = ? AND claim_token = ? AND status = 'running'")
_RAW_CLOSE_RUN = "UPDATE run SET finished_at = ?, outcome = 'completed' WHERE id = ?"
_RAW_DEPENDENTS = "SELECT card_id FROM dependency WHERE depends_on_id = ?"


def _raw_loop(path: str, seconds: float, barrier: Any, *, one_transaction: bool
              ) -> tuple[int, float, float]:
    """Claim and complete with nothing between the statements: the floor."""
    import sqlite3

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
        token = secrets.token_hex(16)
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(_RAW_CLAIM, (token, until, at, at, at)).fetchone()
        if row is None:
            conn.execute("COMMIT")
            break
        card_id, board, attempt = row
        run_id = conn.execute(_RAW_RUN, (card_id, attempt, token, at, at)).lastrowid
        conn.execute(_RAW_EVENT, (board, card_id, run_id, "claimed", "dispatcher", "{}", at))
        if not one_transaction:
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
        conn.execute(_RAW_FINISH, ("ok", at, at, card_id, token))
        conn.execute(_RAW_CLOSE_RUN, (at, run_id))
        conn.execute(_RAW_EVENT, (board, card_id, run_id, "complete", "worker", "{}", at))
        conn.execute(_RAW_DEPENDENTS, (card_id,)).fetchall()
        conn.execute("COMMIT")
        done += 1
    end = time.time()
    conn.close()
    return done, start, end


def _raw2_loop(path: str, seconds: float, barrier: Any) -> tuple[int, float, float]:
    return _raw_loop(path, seconds, barrier, one_transaction=False)


def _raw1_loop(path: str, seconds: float, barrier: Any) -> tuple[int, float, float]:
    return _raw_loop(path, seconds, barrier, one_transaction=True)


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
        loop = {"kanban": _kanban_loop, "kanban_slots": _kanban_slots_loop,
                "raw2": _raw2_loop, "raw1": _raw1_loop, "huey": _huey_loop}[kind]
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
    slots: dict[int, list[Outcome]] = {p: [] for p in sizes.claim_procs}
    huey: dict[int, list[Outcome]] = {p: [] for p in sizes.claim_procs}
    raw: dict[str, list[Outcome]] = {"raw2": [], "raw1": []}
    enqueue: list[float] = []
    for _ in range(sizes.repeats):  # interleaved, so drift in machine load hits all alike
        for kind in raw:
            raw[kind].append(run_board(template, work, kind, 1, sizes.claim_seconds))
        for procs in sizes.claim_procs:
            kanban[procs].append(run_board(template, work, "kanban", procs, sizes.claim_seconds))
            slots[procs].append(run_board(template, work, "kanban_slots", procs,
                                          sizes.claim_seconds))
            outcome, rate = run_huey(work, procs, sizes.claim_seconds, sizes.claim_cards * 2)
            huey[procs].append(outcome)
            enqueue.append(rate)
    return rows(kanban, huey, raw, median(enqueue)) + slot_rows(slots, kanban, raw)


def rows(kanban: dict[int, list[Outcome]], huey: dict[int, list[Outcome]],
         raw: dict[str, list[Outcome]], enqueue_rate: float) -> list[Row]:
    def rate(outcomes: list[Outcome]) -> float:
        return median(o.rate for o in outcomes)

    two, one = rate(raw["raw2"]), rate(raw["raw1"])
    out: list[Row] = []
    n = 1
    for procs, outcomes in kanban.items():
        out.append(Row(f"1.{n}", f"claim+complete/s, {_procs(procs)}", "/s",
                       rate(outcomes), two,
                       "raw sqlite3, 1 transaction per claim + 1 per complete, 1 conn",
                       Goal("ratio", ">=", 0.5)))
        n += 1
    out.append(Row(f"1.{n}", "claim+complete/s, 1 process, vs one transaction", "/s",
                   rate(kanban[min(kanban)]), one,
                   "raw sqlite3, claim and complete in 1 transaction, 1 conn", None,
                   "the floor if claim and complete shared one commit (they cannot: a worker "
                   "runs between them)"))
    n += 1
    for procs, outcomes in kanban.items():
        out.append(Row(f"1.{n}", f"claim+complete/s, {_procs(procs)}, vs huey", "/s",
                       rate(outcomes), rate(huey[procs]),
                       f"huey SqliteStorage dequeue/s, {_procs(procs)}",
                       Goal("ratio", ">=", 2.0)))
        n += 1
    everything = [*[o for v in raw.values() for o in v], *[o for v in kanban.values() for o in v],
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


def slot_rows(slots: dict[int, list[Outcome]], kanban: dict[int, list[Outcome]],
              raw: dict[str, list[Outcome]]) -> list[Row]:
    """The dispatcher's batched cycles beside the raw two-transaction loop and beside
    kanban one card at a time (numbered after the rows above, which keep their keys)."""
    two = median(o.rate for o in raw["raw2"])
    out: list[Row] = []
    for procs, outcomes in slots.items():
        rate = median(o.rate for o in outcomes)
        label = f"claim+complete/s, {_procs(procs)}, {SLOTS} slots"
        doubles = sum(o.doubles for o in outcomes)
        errors = [e for o in outcomes for e in o.errors]
        note = f"one claim transaction for {SLOTS} cards, their completions group-committed"
        if doubles or errors:
            note += f"; {doubles} double claims, errors: {errors[:1]}"
        out.append(Row(f"1.s{procs}", label, "/s", rate if not (doubles or errors) else None,
                       two, "raw sqlite3, 1 transaction per claim + 1 per complete, 1 conn",
                       Goal("ratio", ">=", 0.8), note))
        out.append(Row(f"1.s{procs}.before", label, "/s", rate,
                       median(o.rate for o in kanban[procs]),
                       f"kanban one card per claim, {_procs(procs)}", None))
    return out


def _procs(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"
