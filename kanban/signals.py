"""Ctrl-C (and SIGTERM, SIGHUP) for a command that holds board state in its own process.

`kanban run` claims its lead card and may run a dispatcher inside itself. A signal that
lands in the middle of such a step (a claim just committed but not yet remembered, a
dispatcher registered but not yet watched) would leave a card or a dispatcher row that
nobody releases. Under `guarded()`, the first signal becomes one `Interrupted` raised
outside every `critical()` section (cleaning up after it is one such section, so a
second Ctrl-C does not cut it short); a third signal exits at once (the escape hatch).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REDELIVER_S = 0.005


class Interrupted(KeyboardInterrupt):
    """A stop signal, raised once; `exit_code` is 128 + its number, as shells report."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


class _Guard:
    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self.depth = 0  # nested critical sections on the main thread
        self.pending = False  # a signal came during a critical section

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if redeliver_outside_import_lock(signum, frame):
            return
        self.count += 1
        self.signum = self.signum or signum
        if self.count >= 3:
            os._exit(128 + signum)  # the person insists: no more cleaning up
        if self.depth:
            self.pending = True
        else:  # raised again by a second signal, should the first have been swallowed
            self.raise_now()  # (Python ignores an exception raised inside a weakref callback)

    def raise_now(self) -> None:
        assert self.signum is not None
        self.pending = False
        raise Interrupted(self.signum)


_guard: _Guard | None = None


def redeliver_outside_import_lock(signum: int, frame: FrameType | None) -> bool:
    """True if the signal came inside importlib's module-lock weakref callback, where an
    exception raised is printed and dropped (the Ctrl-C would be lost): it is sent again a
    moment later, when the callback's few lines are long done."""
    if frame is None or frame.f_code.co_name != "cb" or \
            frame.f_code.co_filename != "<frozen importlib._bootstrap>":
        return False
    again = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum))
    again.daemon = True
    again.start()
    return True


@contextmanager
def guarded() -> Iterator[None]:
    """Turn stop signals into one `Interrupted` (main thread only; elsewhere, no change)."""
    global _guard
    if threading.current_thread() is not threading.main_thread() or _guard is not None:
        yield
        return
    _guard = _Guard()
    previous = {sig: signal.signal(sig, _guard.handle) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _guard = None


@contextmanager
def critical() -> Iterator[None]:
    """A step that must finish once begun: a stop signal meanwhile is raised after it (or,
    once the command is already stopping, only remembered)."""
    guard = _guard
    if guard is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    guard.depth += 1
    try:
        yield
    finally:
        guard.depth -= 1
        if guard.depth == 0 and guard.pending:
            guard.raise_now()


def stopping() -> bool:
    """Whether a stop signal has been received under `guarded()`."""
    return _guard is not None and _guard.signum is not None
