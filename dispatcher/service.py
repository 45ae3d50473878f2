"""Running a dispatcher in the foreground, as `kanban dispatch` does."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from dispatcher.loop import Dispatcher, DispatchOptions
from kanban.service import Kanban
from state.config import load_config
from state.paths import DbLocation


def build_dispatcher(kb: Kanban, location: DbLocation,
                     options: DispatchOptions = DispatchOptions()) -> Dispatcher:
    config = load_config(location.home / "config.toml")
    if options.board is not None:
        from kanban.cards import require_board

        with kb.db.read() as conn:
            require_board(conn, options.board)
    return Dispatcher(kb, config, home=location.home, db_target=location.target,
                      options=options)


@contextmanager
def stop_on_signals(dispatcher: Dispatcher) -> Iterator[None]:
    """SIGINT/SIGTERM: first stop claiming and drain; a second one hands cards back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        dispatcher.request_stop()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def dispatch(kb: Kanban, location: DbLocation, options: DispatchOptions, *,
             once: bool = False) -> Dispatcher:
    dispatcher = build_dispatcher(kb, location, options)
    with stop_on_signals(dispatcher):
        dispatcher.run(once=once)
    return dispatcher
