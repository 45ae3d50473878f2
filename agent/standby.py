"""Threads started ahead of need.

A spare worker process (worker/forkserver.py) starts a few while it waits for its card;
the card's heartbeat and its model calls then run on a thread that is already up instead
of paying a thread start (0.1-0.3 ms each, more on a busy machine) on the way to the first
model call. Threads do not survive a fork, so only the process that will use them starts
them. Anywhere else `run_in_thread` simply starts a new thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

_ready: list[_Standby] = []
_lock = threading.Lock()


class _Standby:
    def __init__(self) -> None:
        self._job: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="standby", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self._job.get()()  # one job, then the thread ends

    def give(self, job: Callable[[], None], name: str) -> threading.Thread:
        self.thread.name = name
        self._job.put(job)
        return self.thread


def start(n: int) -> None:
    """Start `n` threads that wait for a job (in a spare worker, before its card)."""
    with _lock:
        _ready.extend(_Standby() for _ in range(n))


def run_in_thread(job: Callable[[], None], name: str) -> threading.Thread:
    """Run `job` on a daemon thread (one started ahead when there is one); its thread."""
    with _lock:
        standby = _ready.pop() if _ready else None
    if standby is not None:
        return standby.give(job, name)
    thread = threading.Thread(target=job, name=name, daemon=True)
    thread.start()
    return thread
