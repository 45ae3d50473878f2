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
