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
from kanban.signals import critical
from kanban.state.paths import DbLocation

STOP_PATIENCE_S = 60.0  # how long the command waits for its dispatcher to hand cards back


class BoardService:
    """Keeps a live dispatcher on a board for as long as a command needs one: the one that
    serves it already, else one run here (started again here if the other one goes)."""

    def __init__(self, kb: Kanban, location: DbLocation, board: str) -> None:
        self.kb, self.location, self.board = kb, location, board
        self.dispatcher: Dispatcher | None = None
        self.thread: threading.Thread | None = None

    def ensure(self) -> bool:
        """True if a live dispatcher serves the board now (starting ours if none does)."""
        if self.thread is not None:
            return self.thread.is_alive()
        with self.kb.db.read() as conn:
            if control.serving_dispatchers(conn, self.board, self.kb.clock()):
                return True
        with critical():  # registered and watched, or not at all
            self.dispatcher = build_dispatcher(self.kb, self.location, DispatchOptions(
                board=self.board, drain_timeout_s=10.0))
            seal_dispatcher()  # this command is a dispatcher now: its credentials out of reach
            self.dispatcher.start()  # here, so a failure to start reaches the caller
            self.thread = threading.Thread(target=self.dispatcher.serve, daemon=True,
                                           name="embedded-dispatcher")
            self.thread.start()
        return True

    def stop(self, *, at_once: bool) -> None:
        """Stop ours (if any): drain, or with `at_once` hand its running cards back now."""
        with critical():
            if self.dispatcher is None:
                return
            self.dispatcher.request_stop()
            if at_once:
                self.dispatcher.request_stop()
            if self.thread is not None:
                self.thread.join(timeout=STOP_PATIENCE_S)
            elif self.dispatcher.id is not None:
                self.dispatcher.shutdown()


@contextmanager
def dispatcher_for(kb: Kanban, location: DbLocation, board: str) -> Iterator[BoardService]:
    """A `BoardService` for `board` (its `dispatcher` is None while another one serves)."""
    service = BoardService(kb, location, board)
    failed = False
    try:
        service.ensure()
        yield service
    except BaseException:  # interrupted: hand the running cards back now, no draining
        failed = True
        raise
    finally:
        service.stop(at_once=failed)
