"""PostgreSQL rows: add→claim latency and claim+complete cycles/s, side by side with
procrastinate and pgqueuer on the same server, each in a database of its own.

- add→claim: a card is added (committed) while a claimer waits the way the dispatcher does
  (LISTEN/NOTIFY watcher, then one claim statement); the others run their own worker
  (procrastinate's Worker, pgqueuer's QueueManager) and a task records when it starts.
- cycles/s: take one ready item and finish it, in a loop, in 1 and 8 processes (smoke: 2):
  kanban's claim (runs and events included) and fenced complete; procrastinate's fetch_job
  and finish_job; pgqueuer's dequeue and log_jobs.
- cycles/s through the batched library paths (bench.dispatch_cycles): one claim statement
  for 8 cards, their completions group-committed by the same process (a fleet's workers
  commit one each); beside pgqueuer taking one job at a time (the rows above) and 8 at a
  time (dequeue 8, log the 8 in one call).
- cycles/s of cards with text (a goal of 60 words, a context of 300) beside one-word cards,
  1 process: what a card's search document costs the hot path.

Each database is analyzed after its fill (bench.postgres.analyze), the same for all.
Rows are left out where no server answers on 127.0.0.1:5432 or a package is missing.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from bench.common import Sizes, percentile, start_together
from bench.dispatch_cycles import SLOTS, dispatcher_cycles
from bench.pg_rivals import (
    BATCH,
    pgqueuer_cycles,
    pgqueuer_fill,
    pgqueuer_latency,
    procrastinate_cycles,
    procrastinate_fill,
    procrastinate_latency,
)
from bench.report import Goal, Row

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
FILL_PER_SECOND = 6000  # queue items per second of the time box: it should not run dry


def available() -> str | None:
    """None if the PostgreSQL rows can run, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        psycopg.connect(ADMIN_URL, connect_timeout=2).close()
    except psycopg.Error as exc:
        return f"no PostgreSQL server on 127.0.0.1:5432 ({str(exc).strip().splitlines()[0]})"
    return None


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    import psycopg

    name = f"bench_{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- kanban -------------------------------------------------------------------------------

def _kanban_fill(url: str, cards: int, *, words: tuple[int, int] = (0, 0)) -> None:
    """`cards` ready cards; `words`: how many words each card's goal and context hold."""
    import random

    from kanban.cards import NewCard
    from kanban.service import Kanban
    from kanban.state import DbLocation, open_database

    vocabulary = [f"word{i}" for i in range(5000)]
    pick = random.Random(0).choices
    db = open_database(DbLocation(url, "flag"))
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        with db.write() as conn:
            from kanban.cards import add_card

            now = kb.clock()
            for i in range(cards):
                goal, context = (" ".join(pick(vocabulary, k=n)) for n in words)
                add_card(conn, NewCard(title=f"bench {i}", goal=goal, context=context), now)
    finally:
        db.dispose()


# A card as people write them: a goal of a paragraph, a page of context.
TEXT_WORDS = (60, 300)


def _kanban_cycles(url: str, seconds: float, start_at: float) -> tuple[int, float, float]:
    from kanban.service import Kanban
    from kanban.state import DbLocation, open_database
    from kanban.transitions import Actor

    db = open_database(DbLocation(url, "flag"))
    kb = Kanban(db)
    done = 0
    try:
        began = start_together(start_at)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            batch = kb.claim(BATCH, lease_s=60)
            if not batch:
                break
            for claim in batch:
                kb.complete(claim.card_id, "ok",
                            actor=Actor(f"card:#{claim.card_id}", claim.claim_token))
                done += 1
    finally:
        db.dispose()
    return done, began, time.time()


def _kanban_dispatcher_cycles(url: str, seconds: float, start_at: float
                              ) -> tuple[int, float, float]:
    return dispatcher_cycles(url, seconds, start=lambda: start_together(start_at))


def _kanban_latency(url: str, samples: int) -> list[float]:
    from kanban.cards import NewCard
    from kanban.dispatcher.wake import change_watcher
    from kanban.service import Kanban
    from kanban.state import DbLocation, open_database

    db = open_database(DbLocation(url, "flag"))
    kb = Kanban(db)
    kb.ensure_board("default")
    watcher = change_watcher(db)
    claimed: dict[int, float] = {}
    stop = threading.Event()
    wake = threading.Event()

    def claimer() -> None:  # the dispatcher's way: wait for a notification, claim
        while not stop.is_set():
            for claim in kb.claim(4, lease_s=60):
                claimed[claim.card_id] = time.perf_counter()
            watcher.wait(1.0, wake)
            wake.clear()

    thread = threading.Thread(target=claimer, daemon=True)
    try:
        assert watcher.listening.wait(10)  # type: ignore[union-attr]
        thread.start()
        latencies = []
        for i in range(samples):
            added = time.perf_counter()  # from the call: the claimer may be done before it
            card = kb.add_card(NewCard(title=f"latency {i}"))  # returns
            _wait(lambda card=card: card.id in claimed, f"kanban claim of #{card.id}")
            latencies.append((claimed[card.id] - added) * 1000)
        return latencies
    finally:
        stop.set()
        wake.set()
        thread.join(timeout=5)
        watcher.close()
        db.dispose()


# --- harness ------------------------------------------------------------------------------

SYSTEMS: dict[str, tuple[str, Callable[[str, int], None],
                         Callable[[str, float, float], tuple[int, float, float]],
                         Callable[[str, int], list[float]]]] = {
    "kanban": ("kanban", _kanban_fill, _kanban_cycles, _kanban_latency),
    "procrastinate": ("procrastinate", procrastinate_fill, procrastinate_cycles,
                      procrastinate_latency),
    "pgqueuer": ("pgqueuer", pgqueuer_fill, pgqueuer_cycles, pgqueuer_latency),
    "kanban_slots": ("kanban", _kanban_fill, _kanban_dispatcher_cycles, _kanban_latency),
    "kanban_text": ("kanban", partial(_kanban_fill, words=TEXT_WORDS), _kanban_cycles,
                    _kanban_latency),
    "pgqueuer_slots": ("pgqueuer", pgqueuer_fill, partial(pgqueuer_cycles, batch=SLOTS),
                       pgqueuer_latency),
}


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.0002)


def analyze(url: str) -> None:
    """Statistics for the freshly filled tables, as autovacuum gathers them within its
    naptime: planned on an empty table's statistics, kanban's claim sorts the whole ready
    queue (it takes the due-time index), which measures the planner's guess, not the queue.
    Every system's database gets the same."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def throughput(system: str, procs: int, sizes: Sizes) -> float:
    """Cycles per second of `procs` processes over one pre-filled queue (a queue that runs
    dry ends the window early; the rate is over the time actually spent)."""
    _, fill, cycles, _ = SYSTEMS[system]
    with scratch_database(system) as url:
        fill(url, max(sizes.claim_cards, int(sizes.claim_seconds * FILL_PER_SECOND)))
        analyze(url)
        start_at = time.time() + 1.5 + 0.3 * procs  # after every process is up
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(procs) as pool:
            results = [pool.apply_async(cycles, (url, sizes.claim_seconds, start_at))
                       for _ in range(procs)]
            parts = [r.get(timeout=120 + sizes.claim_seconds) for r in results]
        done = sum(n for n, _, _ in parts)
        began = min(b for _, b, _ in parts)
        return done / max(1e-6, max(end for _, _, end in parts) - began)


def latency(system: str, sizes: Sizes) -> list[float]:
    _, _, _, measure = SYSTEMS[system]
    with scratch_database(system) as url:
        if system == "kanban":
            _kanban_fill(url, 0)
        # The first item meets a cold worker (connections, prepared statements): not counted.
        return measure(url, max(3, sizes.latency_warm) + 1)[1:]


def _installed(system: str) -> bool:
    try:
        __import__(system)
    except ImportError:
        return False
    return True


def run(sizes: Sizes, work: Path) -> list[Row]:
    why = available()
    if why is not None:
        print(f"bench: postgres rows skipped: {why}", file=sys.stderr)
        return []
    others = [s for s in ("procrastinate", "pgqueuer") if _installed(s)]
    rows: list[Row] = []
    ours = latency("kanban", sizes)
    for other in others:
        theirs = latency(other, sizes)
        for p, goal in ((50, 10.0), (99, 25.0)):
            rows.append(Row(f"pg.lat.p{p}.{other}", f"PostgreSQL add→claim p{p}", "ms",
                            percentile(ours, p), percentile(theirs, p), other,
                            Goal("value", "<=", goal, "ms"),
                            note=f"{len(ours)} cards one at a time; {other}: defer → task "
                                 "start in its own worker" if p == 50 else ""))
    # one process and the most the sizes name (full: 8; smoke: 2, which spawns faster)
    for procs in dict.fromkeys((sizes.claim_procs[0], sizes.claim_procs[-1])):
        ours_cps = throughput("kanban", procs, sizes)
        theirs_cps = {other: throughput(other, procs, sizes) for other in others}
        target = 1000.0 if procs == 1 else 2000.0
        for other in others:
            rows.append(Row(f"pg.cps.{procs}.{other}",
                            f"PostgreSQL claim+complete, {_procs(procs)}", "cycles/s",
                            ours_cps, theirs_cps[other], other,
                            Goal("value", ">=", target, "cycles/s"),
                            note=f"{sizes.claim_seconds:g} s over {sizes.claim_cards} ready "
                                 "items" if other == others[0] else ""))
        rows += _slot_rows(procs, sizes, ours_cps, theirs_cps.get("pgqueuer"))
        if procs == 1:
            rows.append(Row(
                "pg.cps.1.text", "PostgreSQL claim+complete, 1 process, cards with text",
                "cycles/s", throughput("kanban_text", 1, sizes), ours_cps,
                "kanban, the same with one-word cards", None,
                f"goal of {TEXT_WORDS[0]} words, context of {TEXT_WORDS[1]}: a claim and a "
                "heartbeat leave the card's search document alone, a completion parses its "
                "result only (migration 23)"))
    return rows


def _slot_rows(procs: int, sizes: Sizes, one_at_a_time: float,
               pgqueuer: float | None) -> list[Row]:
    """A dispatcher's batched cycles beside kanban one card at a time (the rows above) and
    pgqueuer one job and SLOTS jobs at a time, all in this run."""
    batched = throughput("kanban_slots", procs, sizes)
    label = f"PostgreSQL claim+complete, {_procs(procs)}, {SLOTS} slots"
    rows = [Row(f"pg.cps.{procs}.slots", label, "cycles/s", batched, one_at_a_time,
                "kanban, one card per claim, one commit per complete", None,
                f"one claim statement for {SLOTS} cards, their completions group-committed by "
                "one process (the library's path; a fleet's workers commit one each)")]
    if pgqueuer is not None:
        rows.append(Row(f"pg.cps.{procs}.slots.pgqueuer", label, "cycles/s", batched, pgqueuer,
                        "pgqueuer, one job per dequeue", Goal("ratio", ">=", 1.0)))
        rows.append(Row(f"pg.cps.{procs}.slots.pgqueuer{SLOTS}", label, "cycles/s", batched,
                        throughput("pgqueuer_slots", procs, sizes),
                        f"pgqueuer, {SLOTS} jobs per dequeue, logged in one call", None))
    return rows


def _procs(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"
