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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NamedTuple

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REDELIVER_S = 0.005
DEFER_AT_MOST_S = 2.0  # an import still going by then is interrupted after all
_IMPORTLIB = "<frozen importlib._bootstrap"  # and _bootstrap_external


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
        if redeliver_outside_imports(signum, frame):
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


def redeliver_outside_imports(signum: int, frame: FrameType | None) -> bool:
    """True if the signal came while a module was being imported: it is sent again a moment
    later, once the import is done. Raised inside one, an interrupt is lost or disguised:
    in importlib's module-lock weakref callback Python prints and drops it; in a class body's
    `__set_name__` (a dataclass field) it becomes a RuntimeError; and the module is left
    half-made. An import that is still going after `DEFER_AT_MOST_S` is interrupted after all
    (one that hangs must not make Ctrl-C useless). A command that ends before the signal
    comes again asks `take_deferred()`, and exits as interrupted."""
    global _deferred
    if not _importing(frame):
        _deferred = None
        return False
    now = time.monotonic()
    since = now if _deferred is None else _deferred.since
    if now - since > DEFER_AT_MOST_S and not _in_lock_callback(frame):
        _deferred = None
        return False
    again = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum))
    again.daemon = True
    _deferred = _Deferred(signum, since, again)
    again.start()
    return True


class _Deferred(NamedTuple):
    signum: int
    since: float  # when it first came
    again: threading.Timer  # sends it again


_deferred: _Deferred | None = None


def take_deferred() -> int | None:
    """The signal put off by an import and not yet sent again (now never sent), if any."""
    global _deferred
    deferred, _deferred = _deferred, None
    if deferred is None:
        return None
    deferred.again.cancel()
    return deferred.signum


def _importing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORTLIB):
            return True
        frame = frame.f_back
    return False


def _in_lock_callback(frame: FrameType | None) -> bool:
    """Python drops whatever is raised there, however long it has waited."""
    return frame is not None and frame.f_code.co_name == "cb" and \
        frame.f_code.co_filename == "<frozen importlib._bootstrap>"


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
