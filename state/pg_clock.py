"""The PostgreSQL server's clock, carried by this process (leases, backoff and cron agree
across hosts whatever their own clocks say)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

CLOCK_RESYNC_S = 60.0
PRECISE_S = 0.002  # an estimate looser than this takes another sample, once a second at most
HOLD_S = 2.0  # a reading further back than this is the server's clock set back: followed


class ServerClock:
    """The server's `clock_timestamp()`, sampled on connections and carried forward by this
    process's monotonic clock: one clock for every host, at no round trip per read.

    A sample says the server read its clock somewhere between sending the query and getting
    the answer, so it bounds the offset (server time minus monotonic time) to an interval as
    wide as the round trip. Samples are intersected, so the estimate (the middle of what is
    left) tightens with each one, whatever the load was when the first was taken; a sample
    that does not fit (the server's clock was set, or drifted) or an estimate older than
    CLOCK_RESYNC_S starts over. Readings do not go back for a new estimate (a process that
    stamped a message and then ends its run must not stamp the end before the message);
    they hold until time catches up, unless the server's clock was set back past HOLD_S.
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        # The offset's bounds, as server times at monotonic 0 (one attribute: read whole).
        self._bounds: tuple[datetime, datetime] | None = None
        self._since = 0.0  # monotonic time of the first sample of this estimate
        self._sampled = 0.0  # and of the latest
        self._last: datetime | None = None  # the latest reading handed out

    def sample(self, raw: Any) -> None:
        t0 = self._monotonic()
        server = raw.execute("SELECT clock_timestamp()").fetchone()[0].astimezone(UTC)
        t1 = self._monotonic()
        low, high = server - timedelta(seconds=t1), server - timedelta(seconds=t0)
        with self._lock:
            self._sampled = t1
            old = self._bounds
            if (old is not None and low <= old[1] and high >= old[0]
                    and t1 - self._since <= CLOCK_RESYNC_S):
                self._bounds = (max(old[0], low), min(old[1], high))
            else:
                self._bounds, self._since = (low, high), t1

    @property
    def stale(self) -> bool:
        """Whether a connection in hand should take a sample: none yet, the estimate is old,
        or it is still loose."""
        if self._bounds is None:
            return True
        now = self._monotonic()
        loose = (self.uncertainty_s or 0.0) > PRECISE_S and now - self._sampled > 1.0
        return loose or now - self._since > CLOCK_RESYNC_S

    @property
    def uncertainty_s(self) -> float | None:
        """How far the estimate may be off, at most (half the interval left)."""
        bounds = self._bounds
        return None if bounds is None else (bounds[1] - bounds[0]).total_seconds() / 2

    def now(self) -> datetime | None:
        bounds = self._bounds
        if bounds is None:
            return None
        low, high = bounds
        reading = low + (high - low) / 2 + timedelta(seconds=self._monotonic())
        with self._lock:
            last = self._last
            if last is not None and last - timedelta(seconds=HOLD_S) <= reading < last:
                return last
            self._last = reading
            return reading
