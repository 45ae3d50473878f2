"""Migration 3 on a database that already has cron jobs: they keep working, with a history."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import kanban.state.migrations as migrations
from kanban.cron.firing import fire_due_jobs
from kanban.cron.jobs import JobKind
from kanban.cron.service import CronJobs
from kanban.state.db import open_database
from kanban.state.paths import DbLocation

CREATED = "2026-01-01 00:00:00.000000"


def version_two(path: Path) -> None:
    """A database as migrations 1 and 2 left it, with a job that fired once."""
    folder = Path(migrations.__file__).parent
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE schema_migration (id INTEGER NOT NULL PRIMARY KEY, "
                "name VARCHAR(128) NOT NULL, applied_at DATETIME NOT NULL)")
    for n, name in ((1, "initial"), (2, "board_indexes")):
        old.executescript((folder / f"{n:04d}_{name}.sqlite.sql").read_text())
        old.execute("INSERT INTO schema_migration VALUES (?, ?, ?)", (n, name, CREATED))
    old.execute("INSERT INTO board VALUES ('default', 0, ?)", (CREATED,))
    old.execute("INSERT INTO cron_job (name, board, schedule, timezone, title, goal, profile, "
                "enabled, overlap, next_fire_at, last_fire_at, last_card_id, created_at) VALUES "
                "('nightly', 'default', 'every 1h', 'UTC', 'nightly', 'report', 'default', 1, "
                "'allow', '2026-01-01 02:00:00.000000', ?, 1, ?)", (CREATED, CREATED))
    old.execute(
        "INSERT INTO card (board, title, goal, context, status, priority, profile, depth, "
        "created_by, attempt, max_attempts, retry_base, run_after, input_tokens, "
        "output_tokens, cached_tokens, created_at, updated_at, finished_at, result) VALUES "
        "('default', 'nightly', 'report', '', 'done', 0, 'default', 0, 'cron:nightly', 1, 3, "
        "0, ?, 0, 0, 0, ?, ?, ?, 'all quiet')", (CREATED, CREATED, CREATED, CREATED))
    old.close()


def test_jobs_and_their_cards_survive_migration_three(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    version_two(path)
    db = open_database(DbLocation(str(path), "flag"))
    try:
        jobs = CronJobs(db, clock=lambda: datetime(2026, 1, 1, 1, tzinfo=UTC))
        job = jobs.get("nightly")
        assert (job.kind, job.deliver, job.catch_up, job.jitter_s) == (JobKind.AGENT, (),
                                                                       "once", 0)
        assert job.anchor_at == datetime(2026, 1, 1, tzinfo=UTC)
        _, fires = jobs.history("nightly")
        assert [(f.card_id, f.outcome, f.result) for f in fires] == [(1, "fired", "all quiet")]
        [fired] = fire_due_jobs(db, datetime(2026, 1, 1, 2, tzinfo=UTC) + timedelta(seconds=1))
        assert fired.scheduled_at == datetime(2026, 1, 1, 2, tzinfo=UTC)
        assert fired.next_fire_at == datetime(2026, 1, 1, 3, tzinfo=UTC)
    finally:
        db.dispose()
