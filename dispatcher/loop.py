"""The dispatcher: claim ready cards, spawn workers, reap them, rescue what they drop."""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import datetime
from pathlib import Path

from kanban import claims, control, pg_statements, skill_curator, transitions
from kanban.claims import ClaimFilter
from kanban.cron.firing import fire_due_jobs
from kanban.delivery.courier import Courier
from kanban.dispatcher import rescue
from kanban.dispatcher.breaker import Breaker
from kanban.dispatcher.environment import base_env, card_env, providers_in_use
from kanban.dispatcher.faults import OUTAGE_BACKOFF, FaultDuties
from kanban.dispatcher.instance import Instance, process_start, register
from kanban.dispatcher.local import LocalWorker, LocalWorkers
from kanban.dispatcher.logs import event
from kanban.dispatcher.options import DispatchOptions
from kanban.dispatcher.outbound import courier_for
from kanban.dispatcher.spawn import (
    ForkServerSpawner,
    Spawner,
    SpawnError,
    SpawnRequest,
    SubprocessSpawner,
)
from kanban.dispatcher.stopping import SHUTDOWN_PATIENCE_S, Stopping
from kanban.dispatcher.wake import (
    ChangeWatcher,
    Doorbell,
    NotifyWatcher,
    PollWatcher,
    change_watcher,
)
from kanban.dispatcher.workspace import ready_workspace
from kanban.endpoints import endpoint_profile, with_endpoint
from kanban.records import Claim
from kanban.service import Kanban
from kanban.state.config import Config, Profile, default_max_workers
from kanban.state.errors import DatabaseError, TransientDatabaseError
from kanban.state.pg_fleet import SLOTS_ENV, SlotGate
from kanban.state.retry import retry_transient
from kanban.state.sqlite_errors import BUSY
from kanban.state.store import FileGuard
from kanban.transitions import Actor

__all__ = ["DispatchOptions", "Dispatcher"]

CURATE_EVERY_S = 3600.0  # the skill curator's pace: cheap, and days are its unit
# Cards claimed per transaction: a dispatcher with hundreds of free slots holds SQLite's
# write lock for one short claim at a time (and each batch's workers start, and their pids
# are recorded, before the next batch's leases begin to run).
CLAIM_BATCH = 16
STEP_PATIENCE_S = 2.0  # one step waits this long for the database; the loop retries on


class Dispatcher(FaultDuties, Stopping):
    """One dispatcher over one database; several may share it safely."""

    def __init__(self, kb: Kanban, config: Config, *, home: Path, db_target: str,
                 options: DispatchOptions = DispatchOptions(),
                 env: Mapping[str, str] | None = None) -> None:
        self.kb = kb
        self.config = config
        self.home = home
        self.db_target = db_target
        self.opts = options
        self.env = dict(os.environ if env is None else env)
        self.lease_s = config.limits.lease_s
        self.max_workers = (options.max_workers or config.limits.max_workers
                            or default_max_workers())
        self.instance = Instance()
        self.host = self.instance.host
        self.wake = Doorbell()
        self.workers = LocalWorkers()
        self.ran: set[int] = set()  # the cards it claimed (`dispatch --once` judges them)
        self.id: int | None = None
        self.stopped_by: int | None = None  # the signal that stopped it, if one did
        self.spawner: Spawner | None = None
        self.watcher: ChangeWatcher | NotifyWatcher | PollWatcher | None = None
        self.courier: Courier | None = None  # delivers cron results on its own thread
        self._next_tick = 0.0
        self._next_curate = 0.0  # the skill curator: first tick, then hourly
        self._next_due: datetime | None = None  # earliest backed-off card
        self._exits: deque[tuple[int, int]] = deque()  # reaped, not yet recorded
        self._unrecorded: list[tuple[int, int, int | None]] = []  # (run, pid, start) to store
        self._outage_since: float | None = None
        self._outage_attempt = 0
        self.breaker = Breaker()
        self._lost: list[Claim] = []  # claims whose forkserver died, to hand back
        self._spawner_gone = False  # the forkserver died and could not be restarted yet
        self._breaker_stored = False  # whether the stored breaker state says open
        self._claims_in_doubt = False  # a write failed mid-outage: a claim may have landed
        self.init_stopping()
        self.file_guard: FileGuard | None = None  # SQLite: keeps the -wal file in place
        self.slots: SlotGate | None = None  # PostgreSQL: its workers' connections, bounded

    # lifecycle
    def start(self) -> None:
        from kanban.toolsets import check_config

        check_config(self.config)  # an unknown toolset in a profile stops us here, clearly
        for sub in ("logs", "workspaces"):
            (self.home / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        # Short waits inside a step: the loop itself waits out an outage, reaping meanwhile.
        self.kb.db.patience_s = min(self.kb.db.patience_s, STEP_PATIENCE_S)
        self._check_journal()
        self.id = retry_transient(lambda: register(self.kb, self.instance, self.opts.board),
                                  backoff=OUTAGE_BACKOFF,
                                  stop=self.stop_requested, on_retry=self._say_retry)
        retry_transient(lambda: rescue.adopt_dead_instances(self), backoff=OUTAGE_BACKOFF,
                        stop=self.stop_requested, on_retry=self._say_retry)
        self._start_file_guard()
        if self.kb.db.dialect == "postgresql":
            self.slots = SlotGate.for_workers(
                self.home / "run" / f"pg-slots-{self.instance.id[:16]}", self.max_workers).create()
        self.spawner = self._new_spawner()
        self.watcher = change_watcher(self.kb.db, poll_s=self.opts.poll_s, wakeups_only=True)
        self.courier = courier_for(self.kb.db, self.config, self.home, self.env).start()
        journal = self.kb.db.journal_mode()  # None on PostgreSQL
        event(f"dispatcher {self.id} started: pid {os.getpid()}, {self.max_workers} workers at "
              "most" + (f", board {self.opts.board}" if self.opts.board else "")
              + (f", journal: {journal}" if journal else ""),
              kind="dispatcher_started", dispatcher=self.id, pid=os.getpid(),
              instance=self.instance.id, max_workers=self.max_workers, board=self.opts.board,
              journal=journal)

    def _new_spawner(self) -> Spawner:
        if not self.opts.warm:
            return SubprocessSpawner(self.wake)
        return ForkServerSpawner(base_env(self.env), self.wake, self.db_target,
                                 providers_in_use(self.config, self.env))

    def run(self, *, once: bool = False, until: Callable[[], bool] | None = None) -> None:
        """Start, then loop until asked to stop (or, with `once`, one pass that waits for its
        workers)."""
        self.start()
        self.serve(once=once, until=until)

    def serve(self, *, once: bool = False, until: Callable[[], bool] | None = None) -> None:
        """The loop of a started dispatcher; shuts down when it ends. A database outage
        pauses it (workers keep running) until the database answers again."""
        try:
            while not self.stop_requested.is_set():
                try:
                    self.step()
                except TransientDatabaseError as exc:
                    if exc.kind not in (None, BUSY):  # the host's fault: read-only, full, I/O
                        self._infra_failure(exc.message)
                    self._wait_out_outage(exc)
                    continue
                self._outage_over()
                if once or (until is not None and until()):
                    break
                assert self.watcher is not None
                if self.watcher.wait(self._sleep_budget(), self.wake):
                    event("woke up: the database changed", logging.DEBUG, kind="wake")
                self.wake.clear()
        finally:
            # One pass waits for its own workers (unless stopped); a stop drains, hands back.
            self.shutdown(wait_for_workers=once and not self.stop_requested.is_set())

    def _sleep_budget(self) -> float:
        """Until the next tick, or until a backed-off card becomes due if that is sooner."""
        budget = max(0.0, self._next_tick - time.monotonic())
        if self.breaker.is_open:
            budget = min(budget, max(0.0, self.breaker.next_probe - time.monotonic()))
        if self._next_due is not None:
            due = (self._next_due - self.kb.clock()).total_seconds()
            budget = min(budget, max(0.0, due))
        return budget

    def actor(self, claim_token: str | None = None) -> Actor:
        return Actor(f"dispatcher:{self.id}", claim_token)

    # one pass
    def step(self) -> None:
        """Each duty runs even when another met a busy or unreachable database: rescue must
        still kill a frozen worker that holds SQLite's write lock. Claims wait until all
        duties went through; the first error then pauses the loop."""
        failed: TransientDatabaseError | None = None
        self._hear_file_guard()
        self._replace_lost_forkserver()
        self._ensure_spawner()
        for duty in (self.reap_exited, self._hand_back_lost, self.record_processes,
                     self.police_workers, self._tick_if_due, self._store_breaker):
            try:
                duty()
            except TransientDatabaseError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
        if not self.stop_requested.is_set() and not self._spawner_gone and \
                not self._breaker_holds():
            self.claim_and_spawn()

    def _tick_if_due(self) -> None:
        if time.monotonic() >= self._next_tick:
            self.tick()
            self._next_tick = time.monotonic() + self.opts.tick_s

    def tick(self) -> None:
        """The slow duties: expired leases and orphans, promotions, cron, liveness."""
        rescue.rescue_leases(self)
        promoted = self.kb.promote_ready()
        if promoted:
            event(f"promoted {', '.join(f'#{i}' for i in promoted)} to ready (dependencies "
                  "done)", kind="promoted", cards=promoted)
        resumed = self.kb.resume_settled()
        if resumed:
            event(f"resumed {', '.join(f'#{i}' for i in resumed)} (their children finished)",
                  kind="resumed", cards=resumed)
        for fired in fire_due_jobs(self.kb.db, self.kb.clock(), board=self.opts.board,
                                   profiles=self.config.profiles):
            event(f"cron job {fired.job} {fired.outcome}"
                  + (f": #{fired.card_id} on {fired.board}" if fired.card_id else ""),
                  kind="cron_fired", job=fired.job, outcome=str(fired.outcome),
                  card=fired.card_id, board=fired.board)
        self._curate_if_due()
        event(f"tick: {len(self.workers)} running, next in {self.opts.tick_s:g}s",
              logging.DEBUG, kind="tick", running=len(self.workers))
        assert self.id is not None
        with self.kb.db.write() as conn:
            control.beat_dispatcher(conn, self.id, self.kb.clock())

    def _curate_if_due(self) -> None:
        """The skill curator, at most once per CURATE_EVERY_S; a failure is logged, and the
        curator tries again next time."""
        if time.monotonic() < self._next_curate:
            return
        self._next_curate = time.monotonic() + CURATE_EVERY_S
        done = skill_curator.curate_or_say(
            self.kb.db, self.home, self.config.skills, self.kb.clock(),
            named=skill_curator.named_by_profiles(self.config))
        if isinstance(done, str):
            event(f"skill curator: {done}", logging.WARNING, kind="skills_curated", error=True)
            return
        for move in done.moves:
            event(f"skill curator: {move.name} {move.state} (unused {move.idle_days:.0f} "
                  "days)", kind="skills_curated", skill=move.name, state=move.state)

    def claim_and_spawn(self) -> None:
        self._next_due = None  # recomputed below when nothing is claimable yet
        if self._claims_in_doubt:
            self._adopt_claims_in_doubt()
        slots = self.max_workers - len(self.workers)
        if slots <= 0:
            return  # a worker's exit wakes the loop
        flt = ClaimFilter(board=self.opts.board, exclude_profiles=self._profiles_at_cap())
        if self.kb.db.dialect == "sqlite":
            # A cheap read first: it saves taking SQLite's write lock for nothing.
            with self.kb.db.read() as conn:
                now = self.kb.clock()
                if not claims.has_claimable(conn, now=now, flt=flt):
                    self._next_due = claims.next_due(conn, now=now, flt=flt)
                    return
        while slots > 0:
            batch = min(slots, CLAIM_BATCH)
            began = time.monotonic()  # dispatch latency: from here to each worker's start
            claimed = self.kb.claim(batch, lease_s=self.lease_s, flt=flt,
                                    dispatcher_id=self.id, host=self.host)
            self.ran.update(c.card_id for c in claimed)
            if not claimed:
                with self.kb.db.read() as conn:
                    self._next_due = claims.next_due(conn, now=self.kb.clock(), flt=flt)
                return
            self._spawn_claimed(claimed, began)
            slots -= len(claimed)
            if len(claimed) < batch:
                return

    def _spawn_claimed(self, claimed: list[Claim], began: float) -> None:
        started = [(c, pid, time.monotonic() - began) for c in claimed
                   if (pid := self.spawn(c)) is not None]
        self._unrecorded += [(c.run_id, pid, process_start(pid)) for c, pid, _ in started]
        for c, pid, took in started:
            event(f"claimed #{c.card_id} attempt {c.spent} on {c.board}: worker pid {pid}",
                  kind="claimed", card=c.card_id, attempt=c.attempt, spent=c.spent,
                  board=c.board, pid=pid, run=c.run_id, profile=c.profile,
                  dispatch_s=round(took, 6))
        self.record_processes()

    def record_processes(self) -> None:
        """Store the new workers' (pid, start time); kept for the next pass on an outage."""
        if not self._unrecorded:
            return
        started = list(self._unrecorded)
        if self.kb.db.dialect == "postgresql":
            pg_statements.record_processes(self.kb.db, started, host=self.host)
        else:
            with self.kb.db.write() as conn:
                for run_id, pid, start in started:
                    claims.set_run_process(conn, run_id, pid=pid, host=self.host,
                                           proc_start=start)
        del self._unrecorded[:len(started)]

    def _profiles_at_cap(self) -> list[str]:
        counts = self.workers.per_profile()
        return [name for name, p in self.config.profiles.items()
                if p.max_concurrent is not None and counts[name] >= p.max_concurrent]

    def spawn(self, claim: Claim) -> int | None:
        assert self.spawner is not None
        profile = self._reached_through(
            claim, self.config.profiles.get(claim.profile, self.config.profile("default")))
        timeout = claim.timeout_s or profile.timeout_s
        workspace = ready_workspace(self.kb, claim, home=self.home, config=self.config,
                                    actor=Actor(f"dispatcher:{self.id}", claim.claim_token))
        if workspace is None:
            return None
        env = card_env(self.env, self.config, profile, claim, workspace, timeout_s=timeout,
                       db_target=self.db_target, lease_s=self.lease_s,
                       dispatcher=self.instance.id)
        if self.slots is not None:
            env[SLOTS_ENV] = self.slots.env_value
        request = SpawnRequest(
            env=env, cwd=str(workspace.path),
            log=str(self.home / "logs" / f"{claim.card_id}-{claim.attempt}.log"))
        try:
            pid = self.spawner.spawn(request)
        except SpawnError as exc:
            event(f"#{claim.card_id}: worker did not start: {exc}", logging.ERROR,
                  kind="spawn_failed", card=claim.card_id, error=str(exc))
            self._hand_back(claim, f"worker did not start: {exc}", delay_s=1.0)
            self._infra_failure(f"worker did not start: {exc}")
            return None
        self.workers.add(LocalWorker(claim, pid, claim.profile, timeout))
        return pid

    def _reached_through(self, claim: Claim, profile: Profile) -> Profile:
        """The profile with the endpoint (base_url, keys) of the card that chose its model
        (kanban.endpoints): a card on an inherited model reaches it where its parent does."""
        if claim.model is None or profile.model:
            return profile  # the common case: no read of the board
        with self.kb.db.read() as conn:
            return with_endpoint(profile, endpoint_profile(conn, self.config, claim.card_id))

    def reap_exited(self) -> None:
        """Record each exited worker; an exit stays queued until it is recorded."""
        if self.spawner is None:
            return
        while not self.spawner.exits.empty():
            self._exits.append(self.spawner.exits.get_nowait())
        while self._exits:
            pid, code = self._exits[0]
            worker = self.workers.get(pid)
            if worker is not None:
                infra = rescue.settle_exit(self, worker, code)
                self.workers.pop(pid)
                rescue.log_exit(self, worker, code)
                if infra is not None:
                    self._infra_failure(infra)
                elif code == 0:
                    self.breaker.succeeded()
            self._exits.popleft()

    def police_workers(self) -> None:
        """Timeouts, and workers whose card is no longer theirs (cancelled, rescued)."""
        if len(self.workers):
            rescue.police(self, time.monotonic())

    def _hand_back(self, claim: Claim, reason: str, delay_s: float = 0.0) -> None:
        """Return the card to ready without spending an attempt, if it is still this claim's."""
        with self.kb.db.write() as conn:
            if claims.is_current(conn, claim.card_id, claim.claim_token):
                transitions.hand_back(conn, claim.card_id, reason, now=self.kb.clock(),
                                      actor=self.actor(claim.claim_token), delay_s=delay_s)

    # shutdown
    def shutdown(self, *, wait_for_workers: bool = False) -> None:
        try:
            self._drain(None if wait_for_workers else self.opts.drain_timeout_s)
        finally:
            if self.courier is not None:
                self.courier.stop()
            if self.spawner is not None:
                self.spawner.close()
            if self.watcher is not None:
                self.watcher.close()
            if self.id is not None:
                with suppress(DatabaseError):
                    retry_transient(self._stopped, patience_s=SHUTDOWN_PATIENCE_S,
                                    backoff=OUTAGE_BACKOFF)
            if self.file_guard is not None:
                self.file_guard.stop()
            if self.slots is not None:
                self.slots.remove()  # workers left running connect ungated
            self.stop_done()

    def _stopped(self) -> None:
        assert self.id is not None
        with self.kb.db.write() as conn:
            control.stop_dispatcher(conn, self.id, self.kb.clock())
