"""The workers this dispatcher started and still watches."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from kanban.records import Claim


@dataclass
class LocalWorker:
    claim: Claim
    pid: int
    profile: str
    timeout_s: float
    started: float = field(default_factory=time.monotonic)
    term_sent_at: float | None = None  # SIGTERM for timeout or cancel; SIGKILL after grace
    timed_out: bool = False
    orphaned_at: float | None = None  # when its card stopped being its own

    @property
    def card_id(self) -> int:
        return self.claim.card_id

    def overdue(self, now: float) -> bool:
        return self.term_sent_at is None and now - self.started > self.timeout_s


class LocalWorkers:
    def __init__(self) -> None:
        self._by_pid: dict[int, LocalWorker] = {}

    def add(self, worker: LocalWorker) -> None:
        self._by_pid[worker.pid] = worker

    def get(self, pid: int) -> LocalWorker | None:
        return self._by_pid.get(pid)

    def pop(self, pid: int) -> LocalWorker | None:
        return self._by_pid.pop(pid, None)

    def by_card(self, card_id: int) -> LocalWorker | None:
        return next((w for w in self._by_pid.values() if w.card_id == card_id), None)

    def __iter__(self) -> Iterator[LocalWorker]:
        return iter(list(self._by_pid.values()))

    def __len__(self) -> int:
        return len(self._by_pid)

    def per_profile(self) -> Counter[str]:
        return Counter(w.profile for w in self._by_pid.values())
