"""Whether any cron job will fire: one cheap read, so `kanban status` loads the cron
machinery (schedules, APScheduler's triggers) only on a board that has jobs to show."""

from __future__ import annotations

from kanban.state.store import Conn


def any_will_fire(conn: Conn, *, board: str | None = None) -> bool:
    """An enabled job with a next fire (those `manage.fire_times` lists), on `board`."""
    where = " AND board = :board" if board is not None else ""
    return conn.one("SELECT 1 FROM cron_job WHERE enabled AND next_fire_at IS NOT NULL"
                    f"{where} LIMIT 1", {"board": board}) is not None
