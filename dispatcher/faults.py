"""How the dispatcher meets faults of the host: a database outage it waits out, claims that
landed while their call failed, a worker forkserver that died, a removed -wal file, and
the circuit breaker that stops claiming while workers cannot use the database.

A mixin of `Dispatcher` (dispatcher/loop.py), which owns the state named below.
"""

from __future__ import annotations

import logging
import threading
import time

from kanban import claims, control
from kanban.dispatcher import procs
from kanban.dispatcher.breaker import Breaker
from kanban.dispatcher.instance import process_start
from kanban.dispatcher.local import LocalWorkers
from kanban.dispatcher.logs import event
from kanban.dispatcher.options import DispatchOptions
from kanban.dispatcher.spawn import ForkServerSpawner, Spawner, SpawnError
from kanban.records import Claim
from kanban.service import Kanban
from kanban.state.errors import DatabaseError, TransientDatabaseError
from kanban.state.retry import Backoff
from kanban.state.store import FileGuard

OUTAGE_BACKOFF = Backoff(first_s=0.1, cap_s=5.0)


class FaultDuties:
    """The dispatcher's fault handling (see the module's text)."""

    kb: Kanban
    opts: DispatchOptions
    id: int | None
    max_workers: int
    wake: threading.Event
    stop_requested: threading.Event
    workers: LocalWorkers
    host: str
    spawner: Spawner | None
    breaker: Breaker
    file_guard: FileGuard | None
    _lost: list[Claim]
    _spawner_gone: bool
    _breaker_stored: bool
    _claims_in_doubt: bool
    _outage_since: float | None
    _outage_attempt: int
    _unrecorded: list[tuple[int, int, int | None]]

    # the loop's own, used here
    def _new_spawner(self) -> Spawner:
        raise NotImplementedError

    def spawn(self, claim: Claim) -> int | None:
        raise NotImplementedError

    def reap_exited(self) -> None:
        raise NotImplementedError

    def _hand_back(self, claim: Claim, reason: str, delay_s: float = 0.0) -> None:
        raise NotImplementedError

    def _check_journal(self) -> None:
        """Say it when the board runs without WAL; refuse a board on a network filesystem
        that a dispatcher of another host already uses (SQLite's locks do not hold there)."""
        warning = self.kb.db.journal_warning()
        if warning is None:
            return
        event(warning, logging.WARNING, kind="journal")
        refused = control.shared_network_board(self.kb.db, self.host, self.kb.clock())
        if refused is not None:
            raise DatabaseError(refused)

    def _start_file_guard(self) -> None:
        try:
            self.file_guard = self.kb.db.guard(self.wake)
        except DatabaseError as exc:
            event(f"{exc.message}; running without that guard", logging.WARNING,
                  kind="file_guard_failed", error=exc.message)

    def _hear_file_guard(self) -> None:
        """The guard put a removed -wal back (or could not): stop claiming until a probe
        shows new processes can write again."""
        if self.file_guard is None:
            return
        for what, line in self.file_guard.take_notes():
            event(line, logging.WARNING if what == "restored" else logging.ERROR,
                  kind=f"wal_{what}")
            if self.breaker.trip(line):
                event(f"circuit breaker open ({line}); not claiming, keeping "
                      f"{len(self.workers)} workers, probing the database", logging.WARNING,
                      kind="breaker_open", reason=line, running=len(self.workers))

    def _replace_lost_forkserver(self) -> None:
        """A forkserver that died under us (the OOM killer's first pick) reports no more
        exits: stop the workers it held, give their cards back (no attempt spent), start
        a new one."""
        old = self.spawner
        if not isinstance(old, ForkServerSpawner):
            return
        code = old.lost()
        if code is None:
            return
        self.reap_exited()  # what it reported before it died
        held = list(self.workers)
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        event(f"the worker forkserver (pid {old.pid}) {how}; stopping its {len(held)} "
              "worker(s), requeueing their cards and starting a new one", logging.WARNING,
              kind="forkserver_lost", pid=old.pid, exit_code=code, running=len(held))
        for worker in held:
            procs.kill_and_confirm(worker.pid, timeout=self.opts.kill_grace_s)
            self.workers.pop(worker.pid)
        self._lost.extend(w.claim for w in held)
        old.close()
        self.spawner = None
        self._infra_failure(f"the worker forkserver {how}")
        try:
            self.spawner = self._new_spawner()
        except SpawnError as exc:  # tried again at the next step
            event(f"cannot restart the worker forkserver: {exc}", logging.ERROR,
                  kind="forkserver_failed", error=str(exc))
            self._infra_failure(f"cannot restart the worker forkserver: {exc}")
            self._spawner_gone = True

    def _hand_back_lost(self) -> None:
        """Cards whose workers died with their forkserver; kept until written."""
        while self._lost:
            claim = self._lost[0]
            self._hand_back(claim, "its worker forkserver died")
            self._lost.pop(0)
            event(f"#{claim.card_id} handed back to ready (no attempt spent)", logging.WARNING,
                  kind="handed_back", card=claim.card_id)

    def _ensure_spawner(self) -> None:
        if self._spawner_gone:
            try:
                self.spawner = self._new_spawner()
            except SpawnError as exc:
                self._infra_failure(f"cannot restart the worker forkserver: {exc}")
                return
            self._spawner_gone = False

    def _wait_out_outage(self, exc: TransientDatabaseError) -> None:
        self._claims_in_doubt = True  # the failed call may have been a claim that landed
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            event(f"database unavailable ({exc}); keeping {len(self.workers)} workers and "
                  "retrying", logging.WARNING, kind="database_unavailable", error=str(exc),
                  running=len(self.workers))
        delay = OUTAGE_BACKOFF.delay(self._outage_attempt)
        self._outage_attempt += 1
        self.stop_requested.wait(delay)

    def _outage_over(self) -> None:
        if self._outage_since is not None:
            took = time.monotonic() - self._outage_since
            event(f"database back after {took:.1f}s", logging.WARNING, kind="database_back",
                  outage_s=round(took, 3))
            self._outage_since, self._outage_attempt = None, 0

    def _say_retry(self, exc: TransientDatabaseError, delay: float) -> None:
        event(f"database unavailable ({exc}); retrying in {delay:.1f}s", logging.WARNING,
              kind="database_unavailable", error=str(exc))

    def _infra_failure(self, reason: str) -> None:
        if self.breaker.failed(reason):
            event(f"circuit breaker open after {self.breaker.failures} infrastructure failures "
                  f"in a row ({reason}); not claiming, keeping {len(self.workers)} workers, "
                  "probing the database", logging.WARNING, kind="breaker_open", reason=reason,
                  running=len(self.workers))

    def _breaker_holds(self) -> bool:
        """True while the breaker is open; a due probe (a real write on a fresh connection,
        as a new worker would make) closes it."""
        b = self.breaker
        if not b.is_open:
            return False
        if not b.probe_due():
            return True
        try:
            self.kb.db.probe_write()
        except DatabaseError as exc:
            b.probe_failed(exc.message)
            return True
        took = b.close()
        event(f"circuit breaker closed after {took:.1f}s: the database takes writes again; "
              "claiming", logging.WARNING, kind="breaker_closed", open_s=round(took, 3))
        return False

    def _store_breaker(self) -> None:
        """What `kanban status` and the board show, written once per change."""
        if self.breaker.is_open == self._breaker_stored or self.id is None:
            return
        reason = self.breaker.reason if self.breaker.is_open else None
        with self.kb.db.write() as conn:
            control.set_breaker(conn, self.id, reason, self.kb.clock())
        self._breaker_stored = self.breaker.is_open

    def _adopt_claims_in_doubt(self) -> None:
        """After an outage: claims of ours that committed although the call failed get
        their worker now (or go back to ready when no slot is free), instead of holding
        their cards until the lease runs out."""
        assert self.id is not None
        with self.kb.db.read() as conn:
            found = [c for c in claims.unstarted_claims(conn, self.id)
                     if self.workers.by_card(c.card_id) is None
                     and all(c.run_id != run_id for run_id, _, _ in self._unrecorded)]
        self._claims_in_doubt = False
        for c in found:
            if len(self.workers) >= self.max_workers:
                self._hand_back(c, "claimed during a database outage; no free worker slot")
                continue
            pid = self.spawn(c)
            if pid is None:
                continue
            self._unrecorded.append((c.run_id, pid, process_start(pid)))
            event(f"claimed #{c.card_id} attempt {c.spent} on {c.board} (its claim landed "
                  f"during the outage): worker pid {pid}", kind="claimed", card=c.card_id,
                  attempt=c.attempt, spent=c.spent, board=c.board, pid=pid, run=c.run_id,
                  profile=c.profile)
