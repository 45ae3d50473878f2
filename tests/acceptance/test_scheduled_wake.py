"""A card scheduled a moment ahead wakes an idle dispatcher, which claims it at its time, not
at its next tick: adding it moves the wake-up counter (SQLite) or notifies (PostgreSQL). The
tick here is two minutes, so a claim within one proves the wake-up; the bench (row 8.1) says
how soon after the due time it comes."""

from __future__ import annotations

import threading
from datetime import UTC, timedelta

from kanban.cards import NewCard
from kanban.dispatcher.loop import DispatchOptions
from kanban.dispatcher.service import build_dispatcher
from kanban.state.paths import DbLocation
from tests.acceptance.conftest import BoardFiles
from tests.support.procs import query, wait_until

TICK_S = 120.0


def test_a_scheduled_card_is_claimed_at_its_time_not_at_the_next_tick(
        board: BoardFiles) -> None:
    dispatcher = build_dispatcher(board.kb, DbLocation(str(board.path), "flag"),
                                  DispatchOptions(tick_s=TICK_S, max_workers=1,
                                                  drain_timeout_s=10.0))
    thread = threading.Thread(target=dispatcher.run, name="dispatcher")
    thread.start()
    try:
        wait_until(lambda: dispatcher.watcher is not None, timeout=60, what="its start")
        due = board.kb.clock() + timedelta(seconds=0.3)
        card = board.kb.add_card(NewCard("in a moment", run_at=due, command="true"))
        assert board.kb.card(card.id).status == "scheduled"
        wait_until(lambda: query(board.path, "SELECT count(*) FROM run WHERE card_id = ?",
                                 card.id)[0][0], timeout=TICK_S / 2, what="the claim")
        started = query(board.path, "SELECT started_at FROM run WHERE card_id = ?", card.id)
        assert started[0][0] >= due.astimezone(UTC).replace(tzinfo=None).isoformat(
            " ", "microseconds")  # never before its time
    finally:
        dispatcher.request_stop()
        dispatcher.wake.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
