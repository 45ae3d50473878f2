"""Chained jobs: other jobs' latest results, as the context of a new card."""

from __future__ import annotations

from kanban import validation as v
from kanban.cron import ledger, store
from kanban.cron.jobs import CronJobNotFound, CronJobRecord
from kanban.state.store import Conn

_HEADROOM = 200  # for each part's heading and a cut marker


def chained_context(conn: Conn, job: CronJobRecord) -> str:
    """One section per job read, each with its newest done card's id, time and result."""
    if not job.context_from:
        return ""
    budget = v.MAX_CONTEXT // len(job.context_from) - _HEADROOM
    return "\n\n".join(_section(conn, name, budget) for name in job.context_from)


def _section(conn: Conn, name: str, budget: int) -> str:
    try:
        source = store.get_job(conn, name)
    except CronJobNotFound:
        return f"## cron job {name}\n(no result: there is no cron job named {name!r} any more)"
    latest = ledger.latest_result(conn, source.id)
    if latest is None:
        return f"## cron job {name}\n(no result yet: none of its cards has finished)"
    card_id, result, finished_at = latest
    if len(result) > budget:
        result = f"{result[:budget]}\n[... cut: the whole result is on card #{card_id} ...]"
    return (f"## cron job {name}: latest result (card #{card_id}, finished "
            f"{finished_at:%Y-%m-%d %H:%M:%S} UTC)\n{result}")
