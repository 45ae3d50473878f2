"""A dispatcher inside another command (as `kanban run` uses when none is alive)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dispatcher.loop import Dispatcher, DispatchOptions
from dispatcher.service import build_dispatcher
from kanban import control
from kanban.service import Kanban
from state.paths import DbLocation


def serving_dispatchers(kb: Kanban, board: str) -> list[control.DispatcherInfo]:
    with kb.db.read() as conn:
        return [d for d in control.live_dispatchers(conn, kb.clock()) if d.serves(board)]


@contextmanager
def dispatcher_for(kb: Kanban, location: DbLocation, board: str) -> Iterator[Dispatcher | None]:
    """Yield None when a live dispatcher already serves `board`; else run one meanwhile."""
    if serving_dispatchers(kb, board):
        yield None
        return
    dispatcher = build_dispatcher(kb, location, DispatchOptions(board=board,
                                                                drain_timeout_s=10.0))
    thread = threading.Thread(target=dispatcher.run, name="embedded-dispatcher", daemon=True)
    thread.start()
    try:
        yield dispatcher
    finally:
        dispatcher.request_stop()
        thread.join(timeout=60)
