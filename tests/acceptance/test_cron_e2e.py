"""End to end: a real dispatcher fires a cron job and a real worker completes its card."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from dispatcher.loop import Dispatcher, DispatchOptions
from dispatcher.service import build_dispatcher
from kanban.cron_jobs import CronJobs, NewCronJob
from state.engine import Database
from state.models import Card, Event
from state.paths import DbLocation
from tests.acceptance.conftest import BoardFiles

DEADLINE_S = 15.0
card_t = Card.__table__
event_t = Event.__table__


def cron_cards(db: Database) -> list[dict[str, object]]:
    with db.read() as conn:
        rows = conn.execute(select(card_t).where(card_t.c.created_by == "cron:hello")
                            .order_by(card_t.c.id)).mappings()
        return [dict(r) for r in rows]


def test_a_dispatcher_fires_a_job_and_a_worker_completes_its_card(
    board: BoardFiles, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):  # workers use `scripted:demo`
        monkeypatch.delenv(name, raising=False)
    db = board.kb.db
    CronJobs(db).add(NewCronJob("hello", "every 1s", goal="Say hello to the board.",
                                title="Say hello"))
    dispatcher = build_dispatcher(board.kb, DbLocation(str(board.path), "flag"), DispatchOptions(
        tick_s=0.2, max_workers=2, drain_timeout_s=10.0))
    deadline = time.monotonic() + DEADLINE_S

    def finished() -> bool:
        done = any(card["status"] == "done" for card in cron_cards(db))
        return done or time.monotonic() > deadline

    dispatcher.run(until=finished)
    assert_card_done(db, dispatcher)


def assert_card_done(db: Database, dispatcher: Dispatcher) -> None:
    cards = cron_cards(db)
    done = [card for card in cards if card["status"] == "done"]
    assert done, f"no cron card was completed within {DEADLINE_S}s: {cards}"
    first = done[0]
    assert first["title"] == "Say hello" and first["goal"] == "Say hello to the board."
    assert first["result"], "the worker handed back no result"
    with db.read() as conn:
        kinds = list(conn.execute(select(event_t.c.kind).where(event_t.c.card_id == first["id"])
                                  .order_by(event_t.c.id)).scalars())
    assert kinds[0] == "created" and "cron_fired" in kinds and kinds[-1] == "complete"
    log = dispatcher.home / "logs" / f"{first['id']}-1.log"
    assert "scripted:demo" in log.read_text()
