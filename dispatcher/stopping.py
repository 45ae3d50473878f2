"""How a dispatcher stops: the first signal stops claiming and lets running workers finish
for --drain-timeout, a second (or the timeout) hands their cards back at once, with no
attempt spent.

A mixin of `Dispatcher` (dispatcher/loop.py), which owns the state named below.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import suppress

from kanban.dispatcher import procs
from kanban.dispatcher.faults import OUTAGE_BACKOFF
from kanban.dispatcher.local import LocalWorkers
from kanban.dispatcher.logs import event
from kanban.dispatcher.options import DispatchOptions
from kanban.records import Claim
from kanban.state.errors import DatabaseError, TransientDatabaseError
from kanban.state.retry import retry_transient

SHUTDOWN_PATIENCE_S = 10.0  # how long a stopping dispatcher retries handing cards back


class Stopping:
    """The dispatcher's way of stopping (see the module's text)."""

    opts: DispatchOptions
    workers: LocalWorkers
    wake: threading.Event
    stop_requested: threading.Event
    hand_back: threading.Event
    stopped_by: int | None
    _stop_calls: int

    # the loop's own, used here
    def reap_exited(self) -> None:
        raise NotImplementedError

    def police_workers(self) -> None:
        raise NotImplementedError

    def _hand_back(self, claim: Claim, reason: str, delay_s: float = 0.0) -> None:
        raise NotImplementedError

    def request_stop(self, signum: int | None = None) -> None:
        """First call: stop claiming, drain for --drain-timeout, hand the rest back. Second
        call: hand running cards back now."""
        if signum is not None:
            self.stopped_by = signum
        # Count the call before anything else: a second signal may run this handler again
        # in the middle of the first one's printing, and must count as the second.
        self._stop_calls += 1
        again = self._stop_calls > 1
        self.stop_requested.set()
        if again:
            self.hand_back.set()
            event(f"handing back {len(self.workers)} running card(s)", logging.WARNING,
                  kind="hand_back", running=len(self.workers))
        elif len(self.workers):
            event(f"stopping: {len(self.workers)} running card(s) may finish for "
                  f"{self.opts.drain_timeout_s:g}s, then go back to ready (signal again to "
                  "hand them back now)", kind="draining", running=len(self.workers))
        self.wake.set()

    def _drain(self, timeout_s: float | None) -> None:
        """Let running workers finish for up to timeout_s (None: as long as they take; a
        signal ends that early), then stop the rest and hand their cards back: no attempt
        spent."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(self.workers) and not self.hand_back.is_set() and (
                deadline is None or time.monotonic() < deadline):
            if deadline is None and self.stop_requested.is_set():
                deadline = time.monotonic() + self.opts.drain_timeout_s
            with suppress(TransientDatabaseError):
                self.reap_exited()
                self.police_workers()
            self.wake.wait(0.05)
            self.wake.clear()
        for worker in self.workers:
            procs.kill_and_confirm(worker.pid, timeout=self.opts.kill_grace_s)
        with suppress(DatabaseError):
            retry_transient(self._hand_back_all, patience_s=SHUTDOWN_PATIENCE_S,
                            backoff=OUTAGE_BACKOFF)

    def _hand_back_all(self) -> None:
        for worker in self.workers:
            self._hand_back(worker.claim, "the dispatcher stopped before the card finished")
            self.workers.pop(worker.pid)
            event(f"#{worker.card_id} handed back to ready (no attempt spent)",
                  logging.WARNING, kind="handed_back", card=worker.card_id, pid=worker.pid)
        self.reap_exited()
