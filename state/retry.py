"""Trying again after transient database errors: jittered exponential backoff."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kanban.state.errors import TransientDatabaseError

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Delays first_s·2^n capped at cap_s, each scaled by a random factor in [0.5, 1)."""

    first_s: float = 0.05
    cap_s: float = 2.0

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        raw = min(self.cap_s, self.first_s * 2 ** max(0, attempt))
        return raw * (0.5 + 0.5 * (rng or random).random())


def retry_transient(
    fn: Callable[[], T],
    *,
    backoff: Backoff = Backoff(),
    patience_s: float | None = None,
    idempotent: bool = False,
    stop: threading.Event | None = None,
    on_retry: Callable[[TransientDatabaseError, float], None] | None = None,
) -> T:
    """Call fn until it does not raise a transient error.

    An error whose commit is in doubt is retried only for an `idempotent` fn. Gives up
    (re-raising the last error) after `patience_s`, or at once when `stop` is set.
    """
    deadline = None if patience_s is None else time.monotonic() + patience_s
    attempt = 0
    while True:
        try:
            return fn()
        except TransientDatabaseError as exc:
            if exc.in_doubt and not idempotent:
                raise
            delay = backoff.delay(attempt)
            attempt += 1
            if deadline is not None and time.monotonic() + delay > deadline:
                raise
            if on_retry is not None:
                on_retry(exc, delay)
            if stop is not None:
                if stop.wait(delay):
                    raise
            else:
                time.sleep(delay)


# Faults of the host rather than of a busy lock or an absent server: a worker meeting one
# for long gives its card back (without spending an attempt) instead of waiting on.
HOST_FAULTS = frozenset({"read_only", "full", "io", "wal_missing",
                         "connections"})  # PostgreSQL with no connection to give
HOST_FAULT_PATIENCE_S = 3.0


class HostFaultPatience:
    """An `on_retry` for retry_transient that gives up (re-raising) once faults of the host
    have lasted `patience_s` in a row; other retries are passed on to `then`."""

    def __init__(self, patience_s: float = HOST_FAULT_PATIENCE_S,
                 then: Callable[[TransientDatabaseError, float], None] | None = None) -> None:
        self.patience_s = patience_s
        self.then = then
        self.since: float | None = None

    def __call__(self, exc: TransientDatabaseError, delay: float) -> None:
        if exc.kind in HOST_FAULTS:
            now = time.monotonic()
            self.since = self.since if self.since is not None else now
            if now + delay - self.since > self.patience_s:
                raise exc
        else:
            self.since = None
        if self.then is not None:
            self.then(exc, delay)
