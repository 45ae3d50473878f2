"""A dispatcher inside another command (as `kanban run` uses when none is alive)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kanban import control
from kanban.dispatcher.environment import seal_dispatcher
from kanban.dispatcher.loop import Dispatcher, DispatchOptions
from kanban.dispatcher.service import build_dispatcher
from kanban.service import Kanban
from kanban.state.paths import DbLocation


@contextmanager
def dispatcher_for(kb: Kanban, location: DbLocation, board: str) -> Iterator[Dispatcher | None]:
    """Yield None when a live dispatcher already serves `board`; else run one meanwhile."""
    with kb.db.read() as conn:
        serving = control.serving_dispatchers(conn, board, kb.clock())
    if serving:
        yield None
        return
    dispatcher = build_dispatcher(kb, location, DispatchOptions(board=board,
                                                                drain_timeout_s=10.0))
    seal_dispatcher()  # this command is a dispatcher now: its credentials out of reach
    dispatcher.start()  # here, so a failure to start reaches the caller
    thread = threading.Thread(target=dispatcher.serve, name="embedded-dispatcher", daemon=True)
    thread.start()
    try:
        yield dispatcher
    except BaseException:  # interrupted: hand the running cards back now, no draining
        dispatcher.request_stop()
        raise
    finally:
        dispatcher.request_stop()
        thread.join(timeout=60)
