"""What happens when workers exit, overrun, lose their card or stop heartbeating, and to the
workers of dispatchers that died (orphans).

A process is acted on only when it is certainly the worker: this dispatcher's own child,
or an orphan of a dead dispatcher instance of this host's current boot whose pid still
names the process that started then. Never by hostname and pid alone.
"""

from __future__ import annotations

import logging
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from kanban import claims, control, transitions
from kanban.claims import Lease
from kanban.control import DispatcherInfo
from kanban.dispatcher import procs
from kanban.dispatcher.instance import Instance, is_same_process, process_start
from kanban.dispatcher.local import LocalWorker, LocalWorkers
from kanban.dispatcher.logs import event
from kanban.dispatcher.options import DispatchOptions
from kanban.lead_liveness import orphaned_leads, requeue_orphaned_leads
from kanban.queries import run_result
from kanban.service import Kanban
from kanban.state.config import Config
from kanban.state.store import Conn
from kanban.states import Outcome
from kanban.transitions import Actor


class Dispatcher(Protocol):
    """What these duties need of the dispatcher loop (which imports this module)."""

    kb: Kanban
    config: Config
    opts: DispatchOptions
    workers: LocalWorkers
    id: int | None
    home: Path
    host: str
    instance: Instance
    lease_s: float

    def actor(self, claim_token: str | None = None) -> Actor: ...


EXIT_INFRA = 74  # the worker could not use the database (worker/main.py)
EXIT_LEASE_LOST = 75
# Exits for the database are forgiven (handed back, no attempt spent) this many times in a
# row per card once its model has acted; then each spends one. A worker's commands may
# reach the server (network on) and take its connections, so an exit for the database can
# be the card's own doing: without a bound its model would be run again and again for free.
FORGIVEN_INFRA_EXITS = 3
INFRA_PREFIX = "infrastructure: "
# A run that ended before its model was called: nothing of the card's own ran (see
# _before_model); the two ways it happens, as the run's error says them.
BEFORE_MODEL = "before its model was called"
STALLED = (f"the worker's lease ran out {BEFORE_MODEL} (it was stalled connecting to the "
           "database or starting up)")
ENDED = f"the worker ended {BEFORE_MODEL}"
ORPHAN_GRACE_S = 10.0
LAPSED_GRACE_S = 1.0  # a live worker of ours past its lease: how long its exit may take
# An orphan stops itself this long after its timeout (worker/watchdog.py); a surviving
# dispatcher steps in after twice that.
ORPHAN_TIMEOUT_GRACE_S = 20.0


def settle_exit(d: Dispatcher, worker: LocalWorker, code: int) -> str | None:
    """A worker exited: record its exit code; requeue its card if it left it running.
    Returns the worker's own error when the database failed it (an infrastructure fault:
    the card goes back without spending an attempt)."""
    c = worker.claim
    infra = None
    with d.kb.db.write() as conn:
        if claims.is_current(conn, c.card_id, c.claim_token):
            said = last_line(worker_log(d.home, c.card_id, c.attempt)).removeprefix(
                "kanban worker: ")
            actor = d.actor(c.claim_token)
            infra_exit = code == EXIT_INFRA and not worker.timed_out
            if infra_exit and not _charged(conn, c.card_id, c.run_id):
                infra = said or "the worker could not use the database"
                transitions.hand_back(conn, c.card_id, f"{INFRA_PREFIX}{infra}",
                                      now=d.kb.clock(), actor=actor, delay_s=1.0)
            elif infra_exit:  # its own doing, maybe: a command that takes the server's slots
                infra = said or "the worker could not use the database"
                transitions.requeue_or_fail(
                    conn, c.card_id, Outcome.CRASHED,
                    f"{INFRA_PREFIX}{infra} (after {FORGIVEN_INFRA_EXITS} such exits in a row "
                    "handed back for free, this one spends an attempt)", now=d.kb.clock(),
                    actor=actor)
            else:
                if worker.timed_out:
                    outcome, error = Outcome.TIMED_OUT, f"timed out after {worker.timeout_s:g}s"
                elif code == EXIT_LEASE_LOST:
                    outcome, error = Outcome.LEASE_LOST, "the worker's lease expired"
                else:
                    outcome, error = Outcome.CRASHED, f"worker exited with code {code}" + (
                        f": {said}" if said else "")
                if outcome is Outcome.CRASHED and _before_model(conn, c.card_id, c.run_id):
                    infra = f"{ENDED} ({error})"  # killed at its start: the OOM killer's pick
                    transitions.hand_back(conn, c.card_id, f"{INFRA_PREFIX}{infra}",
                                          now=d.kb.clock(), actor=actor, delay_s=1.0)
                else:
                    transitions.requeue_or_fail(conn, c.card_id, outcome, error,
                                                now=d.kb.clock(), actor=actor)
        claims.record_exit(conn, c.run_id, code)
    return infra


def _charged(conn: Conn, card_id: int, run_id: int) -> bool:
    """Whether run `run_id`'s exit for the database spends an attempt: its model acted (its
    commands may be what took the server), and so did each of the card's last
    FORGIVEN_INFRA_EXITS runs, all handed back for the database. A run whose worker the
    database failed before its model made a call (an outage, a server out of connections
    from the start) counts for nothing either way."""
    if not _acted(conn, run_id):
        return False
    rows = conn.all("SELECT id, outcome, error FROM run WHERE card_id = :id AND id < :run "
                    "AND finished_at IS NOT NULL ORDER BY id DESC LIMIT 50",
                    {"id": card_id, "run": run_id})
    streak = 0
    for earlier, outcome, error in rows:
        if outcome != Outcome.HANDED_BACK or not (error or "").startswith(INFRA_PREFIX):
            return False
        streak += _acted(conn, earlier)
        if streak >= FORGIVEN_INFRA_EXITS:
            return True
    return False


def _acted(conn: Conn, run_id: int) -> bool:
    """Whether the run's model made a tool call (stored before the tool ran)."""
    return conn.one("SELECT 1 FROM message WHERE run_id = :run AND role = 'assistant' AND "
                    "tool_calls IS NOT NULL LIMIT 1", {"run": run_id}) is not None


def worker_log(home: Path, card_id: int, attempt: int) -> Path:
    return home / "logs" / f"{card_id}-{attempt}.log"


def last_line(path: Path, limit: int = 500) -> str:
    """The last non-empty line a worker wrote (its one-line error), bounded."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def log_exit(d: Dispatcher, worker: LocalWorker, code: int) -> None:
    """One line for a finished worker: outcome, duration, tokens."""
    c = worker.claim
    took = time.monotonic() - worker.started
    with d.kb.db.read() as conn:
        result = run_result(conn, c.run_id)
    if result is None:
        return
    outcome = result.outcome or ("timed_out" if worker.timed_out else "exited")
    tokens = f"{result.input_tokens:,} in / {result.output_tokens:,} out"
    level = logging.INFO if result.card_status in ("done", "blocked") else logging.WARNING
    event(f"#{c.card_id} {result.card_status} ({outcome}) after {took:.2f}s: pid {worker.pid} "
          f"exit {code}, tokens {tokens}" + (f"; {result.error}" if result.error and
                                             result.card_status != "done" else "")
          + (f"; {result.waits_for}" if result.waits_for else ""),
          level, kind="finished", card=c.card_id, attempt=c.attempt, pid=worker.pid,
          board=c.board, profile=c.profile,
          exit_code=code, status=result.card_status, outcome=outcome,
          duration_s=round(took, 3), input_tokens=result.input_tokens,
          output_tokens=result.output_tokens, cached_tokens=result.cached_tokens,
          error=result.error, waits_for=result.waits_for)


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
        if worker.overdue(now) and current.get(worker.pid):
            worker.timed_out = True
            _terminate(worker, now, f"card #{worker.card_id} timed out")
        elif not current.get(worker.pid, True):
            # Finished cards let their worker exit by itself; cancelled ones do not wait.
            worker.orphaned_at = worker.orphaned_at or now
            if _cancelled(d, worker) or now - worker.orphaned_at > ORPHAN_GRACE_S:
                _terminate(worker, now, f"card #{worker.card_id} is no longer this worker's")


def _cancelled(d: Dispatcher, worker: LocalWorker) -> bool:
    return d.kb.card(worker.card_id).status == "cancelled"


def _terminate(worker: LocalWorker, now: float, why: str) -> None:
    event(f"{why}; stopping pid {worker.pid}", logging.WARNING, kind="terminating",
          card=worker.card_id, pid=worker.pid, reason=why)
    worker.term_sent_at = now
    procs.signal_group(worker.pid, signal.SIGTERM)


def rescue_leases(d: Dispatcher) -> None:
    """Requeue cards whose lease expired, and orphans that overran their timeout, after
    making sure no worker of theirs that this host can name lives on."""
    requeue_dead_leads(d)
    now = d.kb.clock()
    with d.kb.db.read() as conn:
        leases = claims.running_leases(conn, board=d.opts.board)
        owners = control.dispatchers_by_id(
            conn, {lease.dispatcher_id for lease in leases if lease.dispatcher_id is not None})
    for lease in leases:
        expired = lease.lease_expires_at < now
        local = d.workers.by_card(lease.card_id)
        if local is not None:
            # A worker cut off from the database steps aside just before its lease lapses
            # (exit 74: handed back, no attempt spent); its exit may still be on the way.
            grace = timedelta(seconds=min(LAPSED_GRACE_S, d.lease_s / 2))
            if lease.lease_expires_at + grace < now:
                _rescue(d, lease, local.pid, Outcome.LEASE_LOST, "lease expired (no heartbeat)")
            continue  # police() enforces the timeouts of this dispatcher's own workers
        owner = owners.get(lease.dispatcher_id) if lease.dispatcher_id is not None else None
        if owner is not None and owner.id != d.id and owner.alive(now):
            continue  # a live dispatcher looks after its own workers
        # Overrunning orphans of dead dispatchers; a lead's own card (no dispatcher) is its
        # `kanban run` process's business.
        overdue = lease.dispatcher_id is not None and _overdue(d, lease, now)
        if not (expired or overdue):
            continue  # an orphan still at work within its time: let it finish
        pid = lease.pid if _may_kill(d, owner, lease) else None
        if expired and lease.pid is None:
            _rescue(d, lease, None, Outcome.HANDED_BACK, "claimed, but no worker ever started")
        elif expired:
            _rescue(d, lease, pid, Outcome.LEASE_LOST, "lease expired (no heartbeat)")
        else:
            _rescue(d, lease, pid, Outcome.TIMED_OUT,
                    "timed out while its dispatcher was gone")


def _overdue(d: Dispatcher, lease: Lease, now: datetime) -> bool:
    if lease.started_at is None:
        return False
    profile = d.config.profiles.get(lease.profile)
    timeout = lease.timeout_s or (profile.timeout_s if profile else None)
    if timeout is None:
        return False
    return now > lease.started_at + timedelta(seconds=timeout + ORPHAN_TIMEOUT_GRACE_S)


def _may_kill(d: Dispatcher, owner: DispatcherInfo | None, lease: Lease) -> bool:
    """Only an orphan of a dead instance of this host's current boot, and only while its pid
    still names the process that was started for it."""
    return (owner is not None and owner.id != d.id and owner.host == d.instance.host
            and owner.boot_id is not None and owner.boot_id == d.instance.boot_id
            and is_same_process(lease.pid, lease.proc_start))


def _rescue(d: Dispatcher, lease: Lease, pid: int | None, outcome: Outcome, why: str) -> None:
    if pid is not None and not procs.kill_and_confirm(pid, timeout=d.opts.kill_grace_s):
        return  # still alive: try again next tick rather than run it twice
    with d.kb.db.write() as conn:
        # Locked on PostgreSQL: a heartbeat landing now cannot be overtaken.
        until = claims.current_lease(conn, lease.card_id, lease.claim_token)
        if until is None:
            return  # finished, or rescued by someone else, meanwhile
        now = d.kb.clock()
        if outcome is not Outcome.TIMED_OUT and until >= now:
            return  # renewed meanwhile
        actor = d.actor(lease.claim_token)
        if outcome is Outcome.LEASE_LOST and _before_model(conn, lease.card_id,
                                                           lease.run_id):
            outcome, why = Outcome.HANDED_BACK, f"{INFRA_PREFIX}{STALLED}"
        if outcome is Outcome.HANDED_BACK:
            transitions.hand_back(conn, lease.card_id, why, now=now, actor=actor)
        else:
            transitions.requeue_or_fail(conn, lease.card_id, outcome, why, now=now, actor=actor)
    event(f"#{lease.card_id}: {why}; " + ("handed back" if outcome is Outcome.HANDED_BACK
                                          else "requeued or failed")
          + (f" (pid {pid} stopped)" if pid is not None else ""), logging.WARNING,
          kind="lease_expired" if outcome is Outcome.LEASE_LOST else "rescued",
          card=lease.card_id, pid=pid, outcome=str(outcome))


def _before_model(conn: Conn, card_id: int, run_id: int) -> bool:
    """Whether a run that crashed or let its lease lapse is forgiven as the host's fault:
    an agent card's worker that stored no message yet (killed at its start by the OOM
    killer, stuck reaching a database out of connections, starved of CPU on a busy host)
    never gave its model a turn, so nothing of the card's own did it. Forgiven
    FORGIVEN_INFRA_EXITS times in a row, so that a worker that always fails there (a
    workspace that never gets ready, a bug) still ends its card."""
    if conn.one("SELECT 1 FROM card WHERE id = :id AND command IS NULL",
                {"id": card_id}) is None:
        return False  # a script card stores no messages: they say nothing of the host
    if conn.one("SELECT 1 FROM message WHERE run_id = :run LIMIT 1",
                {"run": run_id}) is not None:
        return False
    rows = conn.all("SELECT outcome, error FROM run WHERE card_id = :id AND id < :run "
                    "AND finished_at IS NOT NULL ORDER BY id DESC LIMIT 50",
                    {"id": card_id, "run": run_id})
    streak = 0
    for outcome, error in rows:
        if outcome != Outcome.HANDED_BACK or not (error or "").startswith(INFRA_PREFIX):
            break
        streak += BEFORE_MODEL in (error or "")
    return streak < FORGIVEN_INFRA_EXITS


def adopt_dead_instances(d: Dispatcher) -> list[int]:
    """At start: earlier dispatcher instances of this host's boot whose process is gone
    died without cleaning up. Their cards go back to ready at once, spending no attempt
    (the dispatcher's death is not the card's fault): a worker of theirs that still runs
    is stopped first. Returns the requeued cards."""
    requeue_dead_leads(d)
    with d.kb.db.read() as conn:
        leases = claims.running_leases(conn, board=d.opts.board)
        owners = control.dispatchers_by_id(
            conn, {lease.dispatcher_id for lease in leases if lease.dispatcher_id is not None})
    dead = {owner.id for owner in owners.values() if _died_here(d, owner)}
    requeued = []
    for lease in leases:
        if lease.dispatcher_id not in dead:
            continue
        pid = lease.pid if is_same_process(lease.pid, lease.proc_start) else None
        if pid is not None and not procs.kill_and_confirm(pid, timeout=d.opts.kill_grace_s):
            continue  # still alive: the lease-based rescue takes it later
        with d.kb.db.write() as conn:
            if claims.current_lease(conn, lease.card_id, lease.claim_token) is None:
                continue
            why = ("its dispatcher died before a worker started" if lease.pid is None
                   else "its dispatcher died")
            transitions.hand_back(conn, lease.card_id, why, now=d.kb.clock(),
                                  actor=d.actor(lease.claim_token))
        requeued.append(lease.card_id)
    if dead:
        with d.kb.db.write() as conn:
            for owner_id in dead:
                control.stop_dispatcher(conn, owner_id, d.kb.clock())
    if requeued:
        event(f"requeued {', '.join(f'#{c}' for c in requeued)} of dead dispatcher(s) "
              f"{', '.join(map(str, sorted(dead)))} (no attempt spent)", logging.WARNING,
              kind="adopted", cards=requeued, dispatchers=sorted(dead))
    return requeued


def requeue_dead_leads(d: Dispatcher) -> list[int]:
    """Leads whose `kanban run` process is gone go back to ready now, no attempt spent."""
    with d.kb.db.read() as conn:
        if not orphaned_leads(conn, board=d.opts.board):
            return []
    with d.kb.db.write() as conn:
        requeued = requeue_orphaned_leads(conn, now=d.kb.clock(), actor=d.actor(),
                                          board=d.opts.board)
    if requeued:
        event(f"requeued lead(s) {', '.join(f'#{c}' for c in requeued)}: their `kanban run` "
              "process is gone (no attempt spent)", logging.WARNING, kind="adopted",
              cards=requeued)
    return requeued


def _died_here(d: Dispatcher, owner: DispatcherInfo) -> bool:
    """An instance of this host's current boot, not stopped, whose process is gone (or is
    this very process: a restarted container may hand the new dispatcher the old pid)."""
    if owner.id == d.id or owner.stopped_at is not None:
        return False
    if owner.host != d.instance.host or owner.boot_id is None or \
            owner.boot_id != d.instance.boot_id:
        return False
    return owner.pid == d.instance.pid or process_start(owner.pid) is None
