"""A worker's own timeout, for when no dispatcher is left to enforce it (an orphan).

Its dispatcher stops it at the card's timeout (SIGTERM, then SIGKILL after a grace); if
it is still running SELF_STOP_GRACE_S later, that dispatcher is gone: the worker records
`timed_out` itself (fenced, so only while its lease holds) and exits.

No thread of its own: the worker's heartbeat thread, which runs for the whole card, wakes
by the deadline too and calls `check` (one thread less to start before the first model
call).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from kanban import transitions
from kanban.states import Outcome
from kanban.tools.scope import WorkerScope

SELF_STOP_GRACE_S = 10.0  # beyond the dispatcher's SIGTERM-to-SIGKILL grace (5 s)
EXIT_TIMED_OUT = 0  # the outcome is recorded: nothing left for a dispatcher to do


class Watchdog:
    def __init__(self, scope: WorkerScope, timeout_s: float, *,
                 grace_s: float = SELF_STOP_GRACE_S,
                 exit: Callable[[int], None] = os._exit) -> None:
        self.scope = scope
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s + grace_s
        self._exit = exit
        self._stopped = False

    def remaining(self) -> float | None:
        """Seconds until the worker stops itself; None once stopped (or fired)."""
        return None if self._stopped else self.deadline - time.monotonic()

    def check(self) -> None:
        """Past the deadline: record the timeout and exit."""
        remaining = self.remaining()
        if remaining is None or remaining > 0:
            return
        self._stopped = True
        s = self.scope
        message = f"timed out after {self.timeout_s:g}s (stopped by the worker itself)"
        print(f"kanban worker: card #{s.card_id} {message}", file=sys.stderr, flush=True)
        try:
            with s.fenced() as conn:
                transitions.requeue_or_fail(conn, s.card_id, Outcome.TIMED_OUT, message,
                                            now=s.kb.clock(), actor=s.actor)
        except Exception as exc:  # noqa: BLE001 - exit regardless; a dispatcher rescues it
            print(f"could not record the timeout: {exc}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit(EXIT_TIMED_OUT)

    def stop(self) -> None:
        self._stopped = True
