"""The circuit breaker: after several infrastructure failures in a row (workers that could
not use the database or could not start, a database that refuses the dispatcher's own
writes) the dispatcher stops claiming, probes the database with backoff, and resumes by
itself. Running workers are left alone; cards are never failed for the host's faults."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kanban.state.retry import Backoff

THRESHOLD = 3  # infrastructure failures in a row that open the breaker
PROBES = Backoff(first_s=0.25, cap_s=5.0)


@dataclass
class Breaker:
    threshold: int = THRESHOLD
    probes: Backoff = PROBES
    failures: int = 0
    reason: str | None = None  # the last failure
    opened_at: float | None = None  # monotonic, while open
    next_probe: float = 0.0
    probe_attempt: int = 0

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None

    def failed(self, reason: str) -> bool:
        """One more infrastructure failure; True when this one opened the breaker."""
        self.failures += 1
        self.reason = reason
        if self.is_open or self.failures < self.threshold:
            return False
        self.opened_at = time.monotonic()
        self.probe_attempt = 0
        self._schedule()
        return True

    def trip(self, reason: str) -> bool:
        """Open now, whatever the count (a fault seen directly); True if it was closed."""
        self.failures = max(self.failures, self.threshold - 1)
        return self.failed(reason)

    def succeeded(self) -> None:
        """Something worked end to end (a worker used the database): the count starts over."""
        if not self.is_open:
            self.failures = 0

    def probe_due(self) -> bool:
        return self.is_open and time.monotonic() >= self.next_probe

    def probe_failed(self, reason: str) -> None:
        self.reason = reason
        self.probe_attempt += 1
        self._schedule()

    def close(self) -> float:
        """The probe went through; returns how long the breaker was open."""
        assert self.opened_at is not None
        took = time.monotonic() - self.opened_at
        self.opened_at, self.failures, self.probe_attempt = None, 0, 0
        return took

    def _schedule(self) -> None:
        self.next_probe = time.monotonic() + self.probes.delay(self.probe_attempt)
