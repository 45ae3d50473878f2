"""Four dispatcher processes firing the same due jobs at the same moment: one card per slot."""

from __future__ import annotations

import multiprocessing
import queue
import traceback
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from cron.firing import FireOutcome, fire_due_jobs
from kanban.cron_jobs import CronJobs, NewCronJob
from state.db import open_database
from state.engine import Database
from state.models import Card, Event
from state.paths import DbLocation

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
DISPATCHERS = 4
SLOTS = 8
JOBS = {"every-minute": "* * * * *", "also-every-minute": "every 1m", "every-other": "*/2 * * * *"}
WAIT_S = 60.0


def dispatcher(path: str, barrier: Any, results: Any) -> None:
    """One dispatcher process: at each simulated minute, wait for the others, then fire."""
    try:
        db = open_database(DbLocation(path, "flag"))
        try:
            fired = []
            for slot in range(1, SLOTS + 1):
                barrier.wait(timeout=WAIT_S)
                for result in fire_due_jobs(db, T0 + slot * MINUTE):
                    assert result.outcome is FireOutcome.FIRED, result
                    assert result.scheduled_at is not None
                    fired.append((result.job, result.scheduled_at.isoformat(), result.card_id))
            results.put(("ok", fired))
        finally:
            db.dispose()
    except BaseException:
        barrier.abort()  # release the others instead of letting them time out
        results.put(("error", traceback.format_exc()))


def cards_by_job(db: Database) -> Counter[str]:
    card_t = Card.__table__
    with db.read() as conn:
        return Counter(conn.execute(select(card_t.c.created_by)).scalars())


def fired_events(db: Database) -> int:
    event_t = Event.__table__
    with db.read() as conn:
        return len(conn.execute(select(event_t.c.id).where(event_t.c.kind == "cron_fired")).all())


def test_racing_dispatchers_fire_each_slot_once(db: Database) -> None:
    assert db.path is not None
    jobs = CronJobs(db, clock=lambda: T0)
    for name, spec in JOBS.items():
        jobs.add(NewCronJob(name, spec, goal="race", overlap="allow"))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(DISPATCHERS)
    results = ctx.Queue()
    procs = [ctx.Process(target=dispatcher, args=(str(db.path), barrier, results))
             for _ in range(DISPATCHERS)]
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=WAIT_S * 2) for _ in procs]
    except queue.Empty:
        outcomes = []
    finally:
        for proc in procs:
            proc.join(timeout=WAIT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
    errors = [detail for status, detail in outcomes if status == "error"]
    assert not errors, errors[0]
    assert len(outcomes) == DISPATCHERS, "a dispatcher process did not report"
    fired = [entry for _, entries in outcomes for entry in entries]
    slots = Counter((job, at) for job, at, _ in fired)
    assert all(count == 1 for count in slots.values()), slots.most_common(3)
    expected = {"every-minute": SLOTS, "also-every-minute": SLOTS, "every-other": SLOTS // 2}
    assert Counter(job for job, _ in slots) == expected
    assert len({card_id for _, _, card_id in fired}) == len(fired)
    assert cards_by_job(db) == Counter({f"cron:{job}": n for job, n in expected.items()})
    assert fired_events(db) == sum(expected.values())
    assert all(proc.exitcode == 0 for proc in procs)
