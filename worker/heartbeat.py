"""The worker's watch thread, independent of the model: it renews the lease every lease/3,
stores the agent's live activity, notices within a fraction of a second when the card is
no longer this worker's (cancelled, rescued), so the run stops at once, and keeps the
card's own deadline (worker.watchdog).

It never dies on an error (the database may be back at the next try), and it stops the
worker once its lease has run out unrenewed (cut off from the database past its lease)."""

from __future__ import annotations

import sys
import threading
import time

from kanban import batch_writes, claims, run_activity
from kanban.agent import standby
from kanban.agent.interrupt import Interrupt
from kanban.batch_writes import ActivityWrite, Renewal
from kanban.errors import LeaseLost
from kanban.state.errors import TransientDatabaseError
from kanban.state.pg_fleet import mark_urgent
from kanban.state.retry import Backoff
from kanban.tools.scope import WorkerScope
from kanban.worker.activity import Activity

CHECK_S = 0.25  # how often the lease is checked (a read) when nothing else is written
RETRY = Backoff(first_s=0.2, cap_s=2.0)  # after a failed write, sooner than the next tick


class HeartbeatThread:
    """With an activity or an interrupt to serve it also watches the lease closely;
    without, it only renews it. It runs on a daemon thread (one started ahead of the card
    in a spare worker: kanban.agent.standby)."""

    def __init__(self, scope: WorkerScope, *, activity: Activity | None = None,
                 interrupt: Interrupt | None = None, check_s: float = CHECK_S) -> None:
        self.name = f"heartbeat-#{scope.card_id}"
        self._thread: threading.Thread | None = None
        self.scope = scope
        self.activity = activity
        self.interrupt = interrupt
        self.interval = max(0.05, scope.lease_s / 3)
        # On a quiet store (PostgreSQL) its connection is closed between renewals.
        watching = (activity is not None or interrupt is not None) and \
            not scope.kb.db.quiet_worker
        self.check_s = min(check_s, self.interval) if watching else self.interval
        self._stopped = False
        self._wake = activity.urgent if activity is not None else threading.Event()

    def start(self) -> None:
        self._thread = standby.run_in_thread(self.run, self.name)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        mark_urgent()  # a busy fleet's start-up reads never take the renewals' connections
        renew_at = time.monotonic() + self.interval
        wait, failures = self.check_s, 0
        while True:
            self._wake.wait(self._until_deadline(wait))
            self._wake.clear()
            if self._stopped:
                return
            if self.scope.deadline is not None:
                self.scope.deadline.check()  # the card's own timeout (an orphan's)
            try:
                self.scope.check_lease()  # by the store's clock, even while cut off
                if time.monotonic() >= renew_at:
                    self._renew()
                    renew_at = time.monotonic() + self.interval
                else:
                    self._store_activity_or_check()
            except LeaseLost as exc:
                if self._lost(exc.message):
                    return
            except Exception as exc:  # noqa: BLE001 - whatever it was, try again soon
                wait = min(self.check_s, RETRY.delay(failures))
                if isinstance(exc, TransientDatabaseError):
                    self.scope.step_aside_if_lapsing(exc, wait)
                print(f"heartbeat failed: {exc}", file=sys.stderr, flush=True)
                failures += 1
                continue
            wait, failures = self.check_s, 0

    def _until_deadline(self, wait: float) -> float:
        remaining = self.scope.deadline.remaining() if self.scope.deadline else None
        return wait if remaining is None else max(0.0, min(wait, remaining))

    def _renew(self) -> None:
        """Renew the lease; fresh activity goes in the same commit (kanban.batch_writes)."""
        s = self.scope
        snapshot = self.activity.take() if self.activity is not None else None
        if snapshot is None:
            s.lease_until = s.kb.heartbeat(s.card_id, s.claim_token, run_id=s.run_id,
                                           lease_s=s.lease_s)
            return
        renewed, stored = batch_writes.apply(s.kb.db, [
            Renewal(s.card_id, s.claim_token, s.run_id, s.lease_s),
            ActivityWrite(s.card_id, s.claim_token, s.run_id, snapshot)], now=s.kb.clock())
        for outcome in (renewed, stored):
            if isinstance(outcome, BaseException):
                raise outcome
        s.lease_until = renewed

    def _store_activity_or_check(self, *, check: bool = True) -> None:
        """One fenced write when there is activity to store, else one cheap read."""
        s = self.scope
        snapshot = self.activity.take() if self.activity is not None else None
        if snapshot is None:
            if not check:
                return
            with s.kb.db.read() as conn:
                if not claims.is_current(conn, s.card_id, s.claim_token):
                    raise LeaseLost(f"card #{s.card_id} is no longer this worker's")
            return
        run_activity.store_activity(s.kb.db, s.run_id, s.card_id, s.claim_token, snapshot,
                              now=s.kb.clock())

    def _lost(self, message: str) -> bool:
        """The card is not ours any more; True when this thread should end."""
        if self.scope.finished or self.scope.finishing:
            return True  # our own kanban_complete/kanban_block took it
        if self.interrupt is not None:
            self.interrupt.cancel(message)
        self.scope.on_lease_lost(message)
        return True

    def stop(self) -> None:
        """End the thread and wait for it, so no check runs after the caller moves on."""
        self._stopped = True
        self._wake.set()
        if self.is_alive() and threading.current_thread() is not self._thread:
            self.join(timeout=10)
