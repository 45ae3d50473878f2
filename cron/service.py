"""`CronJobs`: cron over one database, one transaction per call (the faces use this)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from kanban.cron import firing, ledger, manage, store
from kanban.cron.checks import Environment
from kanban.cron.jobs import CronJobRecord, JobSpec
from kanban.state.store import Database
from kanban.state.timeutil import utcnow


class CronJobs:
    """Cron jobs over one database; `env` (config, toolsets, PATH) checks what jobs name."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utcnow,
                 env: Environment | None = None) -> None:
        self.db = db
        self.clock = clock
        self.env = env

    # changes
    def add(self, spec: JobSpec) -> CronJobRecord:
        with self.db.write() as conn:
            return manage.add_job(conn, spec, self.clock(), env=self.env)

    def edit(self, name: str, changes: Mapping[str, Any]) -> CronJobRecord:
        with self.db.write() as conn:
            return manage.edit_job(conn, name, changes, self.clock(), env=self.env)

    def remove(self, name: str) -> CronJobRecord:
        with self.db.write() as conn:
            return manage.remove_job(conn, name, self.clock())

    def enable(self, name: str) -> CronJobRecord:
        with self.db.write() as conn:
            return manage.set_enabled(conn, name, True, self.clock())

    def disable(self, name: str) -> CronJobRecord:
        with self.db.write() as conn:
            return manage.set_enabled(conn, name, False, self.clock())

    def redeliver(self, name: str) -> list[int]:
        with self.db.write() as conn:
            return manage.redeliver(conn, name, self.clock())

    # fires
    def run(self, name: str) -> firing.FireResult:
        return firing.fire_job_now(self.db, name, self.clock(), self._profiles())

    def fire_due(self, *, board: str | None = None) -> list[firing.FireResult]:
        return firing.fire_due_jobs(self.db, self.clock(), board=board,
                                    profiles=self._profiles())

    def _profiles(self) -> firing.Profiles:
        return self.env.config.profiles if self.env is not None else firing.NO_PROFILES

    # reads
    def get(self, name: str) -> CronJobRecord:
        with self.db.read() as conn:
            return store.get_job(conn, name)

    def jobs(self, *, board: str | None = None) -> list[CronJobRecord]:
        with self.db.read() as conn:
            return manage.list_jobs(conn, board=board)

    def detail(self, name: str, *, fires: int = 5, history: int = 10) -> manage.CronJobDetail:
        with self.db.read() as conn:
            return manage.job_detail(conn, name, self.clock(), fires=fires, history=history)

    def history(self, name: str, *, limit: int = 20
                ) -> tuple[CronJobRecord, list[ledger.FireRecord]]:
        with self.db.read() as conn:
            return manage.history(conn, name, limit=limit)

    def upcoming(self, limit: int = 5, *, board: str | None = None
                 ) -> list[manage.UpcomingFire]:
        with self.db.read() as conn:
            return manage.upcoming_fires(conn, self.clock(), limit, board=board)


class _HasDatabase(Protocol):
    db: Database


def next_fires(source: Database | _HasDatabase, now: datetime, limit: int = 5, *,
               board: str | None = None) -> list[manage.UpcomingFire]:
    """Upcoming fires for `kanban status`; `source` is a Database or a `Kanban`."""
    db = source if isinstance(source, Database) else source.db
    with db.read() as conn:
        return manage.upcoming_fires(conn, now, limit, board=board)
