"""What happens when workers exit, overrun, lose their card or stop heartbeating."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from dispatcher import procs
from dispatcher.local import LocalWorker
from kanban import claims, transitions
from kanban.states import Outcome
from kanban.transitions import Actor

if TYPE_CHECKING:
    from dispatcher.loop import Dispatcher

EXIT_LEASE_LOST = 75
ORPHAN_GRACE_S = 10.0


def settle_exit(d: Dispatcher, worker: LocalWorker, code: int) -> None:
    """A worker exited: record its exit code; requeue its card if it left it running."""
    c = worker.claim
    with d.kb.db.write() as conn:
        if claims.is_current(conn, c.card_id, c.claim_token):
            if worker.timed_out:
                outcome, error = Outcome.TIMED_OUT, f"timed out after {worker.timeout_s:g}s"
            else:
                outcome, error = Outcome.CRASHED, f"worker exited with code {code}"
            transitions.requeue_or_fail(conn, c.card_id, outcome, error, now=d.kb.clock(),
                                        actor=Actor(f"dispatcher:{d.id}", c.claim_token))
        claims.record_exit(conn, c.run_id, code)


def police(d: Dispatcher, now: float) -> None:
    """SIGTERM overdue or disowned workers; SIGKILL them after the grace period."""
    with d.kb.db.read() as conn:
        current = {w.pid: claims.is_current(conn, w.card_id, w.claim.claim_token)
                   for w in d.workers}
    for worker in d.workers:
        if worker.term_sent_at is not None:
            if now - worker.term_sent_at > d.opts.kill_grace_s:
                procs.signal_group(worker.pid, signal.SIGKILL)
            continue
        if worker.overdue(now) and current[worker.pid]:
            worker.timed_out = True
            _terminate(worker, now, f"card #{worker.card_id} timed out")
        elif not current[worker.pid]:
            # Finished cards let their worker exit by itself; cancelled ones do not wait.
            worker.orphaned_at = worker.orphaned_at or now
            if _cancelled(d, worker) or now - worker.orphaned_at > ORPHAN_GRACE_S:
                _terminate(worker, now, f"card #{worker.card_id} is no longer this worker's")


def _cancelled(d: Dispatcher, worker: LocalWorker) -> bool:
    return d.kb.card(worker.card_id).status == "cancelled"


def _terminate(worker: LocalWorker, now: float, why: str) -> None:
    print(f"kanban dispatch: {why}; stopping pid {worker.pid}", file=sys.stderr, flush=True)
    worker.term_sent_at = now
    procs.signal_group(worker.pid, signal.SIGTERM)


def rescue_expired_leases(d: Dispatcher) -> None:
    """Requeue (or fail) cards whose lease expired, after making sure no worker lives on."""
    now = d.kb.clock()
    with d.kb.db.read() as conn:
        expired = [lease for lease in claims.running_leases(conn, board=d.opts.board)
                   if lease.lease_expires_at < now]
    for lease in expired:
        local = d.workers.by_card(lease.card_id)
        pid = local.pid if local else (lease.pid if lease.host == d.host else None)
        if pid is not None and not procs.kill_and_confirm(pid, timeout=d.opts.kill_grace_s):
            continue  # still alive: try again next tick rather than run it twice
        with d.kb.db.write() as conn:
            if not claims.is_current(conn, lease.card_id, lease.claim_token):
                continue
            renewed = claims.lease_of(conn, lease.card_id)
            if renewed is not None and renewed >= d.kb.clock():
                continue  # renewed meanwhile
            transitions.requeue_or_fail(conn, lease.card_id, Outcome.LEASE_LOST,
                                        "lease expired (no heartbeat)", now=d.kb.clock(),
                                        actor=Actor(f"dispatcher:{d.id}", lease.claim_token))
