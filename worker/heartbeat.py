"""The lease-renewing thread: independent of the model, every lease/3."""

from __future__ import annotations

import sys
import threading

from kanban.errors import LeaseLost
from state.errors import DatabaseError
from tools.scope import WorkerScope


class HeartbeatThread(threading.Thread):
    def __init__(self, scope: WorkerScope) -> None:
        super().__init__(name=f"heartbeat-#{scope.card_id}", daemon=True)
        self.scope = scope
        self.interval = max(0.05, scope.lease_s / 3)
        self._stop_event = threading.Event()

    def run(self) -> None:
        s = self.scope
        while not self._stop_event.wait(self.interval):
            try:
                s.kb.heartbeat(s.card_id, s.claim_token, run_id=s.run_id, lease_s=s.lease_s)
            except LeaseLost as exc:
                s.on_lease_lost(exc.message)
                return
            except DatabaseError as exc:  # transient (e.g. disk busy): try again next beat
                print(f"heartbeat failed: {exc}", file=sys.stderr, flush=True)

    def stop(self) -> None:
        self._stop_event.set()
