"""Four dispatcher processes firing the same due jobs at the same moment, and a fifth running
`kanban cron run` beside them: one card per slot, for agent, script and chain jobs alike."""

from __future__ import annotations

import multiprocessing
import queue
import traceback
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from kanban.cron.firing import FireOutcome, fire_due_jobs, fire_job_now
from kanban.cron.jobs import JobSpec
from kanban.cron.service import CronJobs
from kanban.state.db import open_database
from kanban.state.paths import DbLocation
from kanban.state.store import Database

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
DISPATCHERS = 4
SLOTS = 8
JOBS = {
    "every-minute": JobSpec("every-minute", "* * * * *", goal="race", overlap="allow"),
    "also-every-minute": JobSpec("also-every-minute", "every 1m", goal="race", overlap="allow"),
    "every-other": JobSpec("every-other", "*/2 * * * *", goal="race", overlap="allow"),
    "script": JobSpec("script", "* * * * *", command="date", overlap="allow",
                      deliver=("cmd:cat",)),
    "chain": JobSpec("chain", "*/2 * * * *", goal="digest", context_from=("script",),
                     overlap="allow", deliver=("cmd:cat", "board:1")),
}
SCHEDULED = {"every-minute": SLOTS, "also-every-minute": SLOTS, "every-other": SLOTS // 2,
             "script": SLOTS, "chain": SLOTS // 2}
MANUAL_JOB = "script"  # `cron run` races the dispatchers for this job's slots
WAIT_S = 60.0


def dispatcher(path: str, barrier: Any, results: Any, manual: bool) -> None:
    """One process: at each simulated minute, wait for the others, then fire (a dispatcher's
    tick) or run one job by hand (`kanban cron run`)."""
    try:
        db = open_database(DbLocation(path, "flag"))
        try:
            fired = []
            for slot in range(1, SLOTS + 1):
                barrier.wait(timeout=WAIT_S)
                now = T0 + slot * MINUTE
                batch = [fire_job_now(db, MANUAL_JOB, now)] if manual else fire_due_jobs(db, now)
                for result in batch:
                    assert result.outcome is FireOutcome.FIRED, result
                    scheduled = result.scheduled_at.isoformat() if result.scheduled_at else None
                    fired.append((result.job, scheduled, result.card_id, manual))
            results.put(("ok", fired))
        finally:
            db.dispose()
    except BaseException:
        barrier.abort()  # release the others instead of letting them time out
        results.put(("error", traceback.format_exc()))


def count(db: Database, sql: str) -> int:
    with db.read() as conn:
        return int(conn.scalar(sql))


def test_racing_dispatchers_fire_each_slot_once(db: Database) -> None:
    assert db.path is not None
    jobs = CronJobs(db, clock=lambda: T0)
    from kanban.cards import NewCard
    from kanban.service import Kanban

    Kanban(db).add_card(NewCard("inbox for the chain's results"))  # board:1
    for spec in JOBS.values():
        jobs.add(spec)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(DISPATCHERS + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=dispatcher, args=(str(db.path), barrier, results, n == 0))
             for n in range(DISPATCHERS + 1)]
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
    assert len(outcomes) == DISPATCHERS + 1, "a process did not report"
    fired = [entry for _, entries in outcomes for entry in entries]

    # every scheduled slot of every job, by a dispatcher or by `cron run`, exactly once
    slots = Counter((job, at) for job, at, _, _ in fired if at is not None)
    assert all(n == 1 for n in slots.values()), slots.most_common(3)
    assert Counter(job for job, _ in slots) == SCHEDULED
    # each `cron run` made one card: it took the slot, or it came after the dispatcher
    manual = [entry for entry in fired if entry[3]]
    assert len(manual) == SLOTS and all(card for _, _, card, _ in manual)
    extra = sum(1 for _, at, _, _ in manual if at is None)
    assert len({card for _, _, card, _ in fired}) == len(fired) == sum(SCHEDULED.values()) + extra

    with db.read() as conn:
        by_job = Counter(conn.column("SELECT created_by FROM card WHERE created_by LIKE 'cron:%'"))
        script_commands = set(conn.column(
            "SELECT command FROM card WHERE created_by = 'cron:script'"))
        chain_contexts = conn.column("SELECT context FROM card WHERE created_by = 'cron:chain'")
    expected = {f"cron:{job}": n for job, n in SCHEDULED.items()}
    expected[f"cron:{MANUAL_JOB}"] += extra
    assert by_job == Counter(expected)
    assert script_commands == {"date"}
    assert all(ctx.startswith("## cron job script") for ctx in chain_contexts)
    assert count(db, "SELECT count(*) FROM event WHERE kind = 'cron_fired'") == len(fired)
    assert count(db, "SELECT count(*) FROM cron_fire") == len(fired)
    # one delivery row per target and fire
    deliveries = expected["cron:script"] + 2 * expected["cron:chain"]
    assert count(db, "SELECT count(*) FROM cron_delivery") == deliveries
    assert all(proc.exitcode == 0 for proc in procs)
