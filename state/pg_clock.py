"""The PostgreSQL server's clock, carried by this process (leases, backoff and cron agree
across hosts whatever their own clocks say)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

CLOCK_RESYNC_S = 60.0


class ServerClock:
    """The server's `clock_timestamp()`, sampled on a connection and carried forward by this
    process's monotonic clock: one clock for every host, at no round trip per read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: datetime | None = None
        self._mono = 0.0
        self._rtt = 0.0

    def sample(self, raw: Any) -> None:
        t0 = time.monotonic()
        server = raw.execute("SELECT clock_timestamp()").fetchone()[0]
        t1 = time.monotonic()
        with self._lock:
            fresh = self._server is None or t1 - self._mono > CLOCK_RESYNC_S
            if fresh or t1 - t0 <= max(2 * self._rtt, 0.002):  # keep the tighter sample
                self._server, self._mono, self._rtt = server.astimezone(UTC), (t0 + t1) / 2, \
                    t1 - t0

    @property
    def stale(self) -> bool:
        return self._server is None or time.monotonic() - self._mono > CLOCK_RESYNC_S

    def now(self) -> datetime | None:
        server, mono = self._server, self._mono
        if server is None:
            return None
        return server + timedelta(seconds=time.monotonic() - mono)
