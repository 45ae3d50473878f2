"""The dispatcher: claim ready cards, spawn workers, reap them, rescue what they drop."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cron.firing import fire_due_jobs
from dispatcher import procs, rescue
from dispatcher.environment import base_env, worker_env
from dispatcher.local import LocalWorker, LocalWorkers
from dispatcher.spawn import (
    ForkServerSpawner,
    Spawner,
    SpawnError,
    SpawnRequest,
    SubprocessSpawner,
)
from dispatcher.wake import ChangeWatcher
from kanban import claims, control, transitions
from kanban.claims import ClaimFilter
from kanban.records import Claim
from kanban.service import Kanban
from kanban.states import Outcome
from kanban.transitions import Actor
from state.config import Config, default_max_workers
from state.timeutil import utcnow


@dataclass(frozen=True)
class DispatchOptions:
    max_workers: int = 0  # 0: from config, else from cores and memory
    board: str | None = None
    tick_s: float = 1.0
    poll_s: float = 0.005
    kill_grace_s: float = 5.0
    drain_timeout_s: float = 30.0
    warm: bool = True


class Dispatcher:
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
        self.host = socket.gethostname()
        self.wake = threading.Event()
        self.stop_requested = threading.Event()
        self.hand_back = threading.Event()
        self.workers = LocalWorkers()
        self.id: int | None = None
        self.spawner: Spawner | None = None
        self.watcher: ChangeWatcher | None = None
        self._next_tick = 0.0
        self._next_due: datetime | None = None  # earliest backed-off card

    # lifecycle
    def start(self) -> None:
        for sub in ("logs", "workspaces"):
            (self.home / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        with self.kb.db.write() as conn:
            self.id = control.register_dispatcher(conn, host=self.host, pid=os.getpid(),
                                                  now=self.kb.clock(), board=self.opts.board)
        self.spawner = (
            ForkServerSpawner(base_env(self.env), self.wake, self.db_target,
                              self.providers_in_use())
            if self.opts.warm else SubprocessSpawner(self.wake))
        path = None if self.kb.db.dialect != "sqlite" else self.kb.db.path
        self.watcher = ChangeWatcher(path, poll_s=self.opts.poll_s)

    def providers_in_use(self) -> set[str]:
        """SDKs worth preloading: those of the profiles' models and of keys present."""
        specs = [p.resolved_model(self.env) for p in self.config.profiles.values()]
        found = {spec.split(":", 1)[0] for spec in specs}
        found |= {name for name, key in (("openai", "OPENAI_API_KEY"),
                                         ("anthropic", "ANTHROPIC_API_KEY")) if self.env.get(key)}
        return found & {"openai", "anthropic"}

    def run(self, *, once: bool = False, until: Callable[[], bool] | None = None) -> None:
        """Start, then loop until asked to stop (or, with `once`, one pass that waits for its
        workers)."""
        self.start()
        self.serve(once=once, until=until)

    def serve(self, *, once: bool = False, until: Callable[[], bool] | None = None) -> None:
        """The loop of a started dispatcher; shuts down when it ends."""
        try:
            while not self.stop_requested.is_set():
                self.step()
                if once or (until is not None and until()):
                    break
                assert self.watcher is not None
                self.watcher.wait(self._sleep_budget(), self.wake)
                self.wake.clear()
        finally:
            self.shutdown()

    def _sleep_budget(self) -> float:
        """Until the next tick, or until a backed-off card becomes due if that is sooner."""
        budget = max(0.0, self._next_tick - time.monotonic())
        if self._next_due is not None:
            due = (self._next_due - self.kb.clock()).total_seconds()
            budget = min(budget, max(0.0, due))
        return budget

    def request_stop(self) -> None:
        """First call: stop claiming and drain. Second call: hand running cards back."""
        if self.stop_requested.is_set():
            self.hand_back.set()
        self.stop_requested.set()
        self.wake.set()

    # one pass
    def step(self) -> None:
        self.reap_exited()
        self.police_workers()
        if time.monotonic() >= self._next_tick:
            self._next_tick = time.monotonic() + self.opts.tick_s
            self.tick()
        if not self.stop_requested.is_set():
            self.claim_and_spawn()

    def tick(self) -> None:
        """The slow duties: expired leases, promotions, cron, liveness."""
        rescue.rescue_expired_leases(self)
        self.kb.promote_ready()
        fire_due_jobs(self.kb.db, self.kb.clock(), board=self.opts.board)
        assert self.id is not None
        with self.kb.db.write() as conn:
            control.beat_dispatcher(conn, self.id, self.kb.clock())

    def claim_and_spawn(self) -> None:
        self._next_due = None  # recomputed below when nothing is claimable yet
        slots = self.max_workers - len(self.workers)
        if slots <= 0:
            return  # a worker's exit wakes the loop
        flt = ClaimFilter(board=self.opts.board, exclude_profiles=self._profiles_at_cap())
        with self.kb.db.read() as conn:
            now = self.kb.clock()
            if not claims.has_claimable(conn, now=now, flt=flt):
                self._next_due = claims.next_due(conn, now=now, flt=flt)
                return
        claimed = self.kb.claim(slots, lease_s=self.lease_s, flt=flt, dispatcher_id=self.id,
                                host=self.host)
        started = [(c, pid) for c in claimed if (pid := self.spawn(c)) is not None]
        if started:
            with self.kb.db.write() as conn:
                for c, pid in started:
                    claims.set_run_process(conn, c.run_id, pid=pid, host=self.host)

    def _profiles_at_cap(self) -> list[str]:
        counts = self.workers.per_profile()
        return [name for name, p in self.config.profiles.items()
                if p.max_concurrent is not None and counts[name] >= p.max_concurrent]

    def spawn(self, claim: Claim) -> int | None:
        assert self.spawner is not None
        profile = self.config.profiles.get(claim.profile, self.config.profile("default"))
        model = claim.model or profile.resolved_model(self.env)
        env = worker_env(self.env, model=model, base_url=profile.base_url, card={
            "KANBAN_DB": self.db_target, "KANBAN_BOARD": claim.board,
            "KANBAN_CARD": str(claim.card_id), "KANBAN_CLAIM_TOKEN": claim.claim_token,
            "KANBAN_RUN": str(claim.run_id), "KANBAN_LEASE_S": str(self.lease_s),
        })
        board_dir = self.home / "workspaces" / claim.board
        board_dir.mkdir(mode=0o700, exist_ok=True)  # each level private, not just the last
        request = SpawnRequest(
            env=env, cwd=str(board_dir / str(claim.card_id)),
            log=str(self.home / "logs" / f"{claim.card_id}-{claim.attempt}.log"))
        try:
            pid = self.spawner.spawn(request)
        except SpawnError as exc:
            print(f"kanban dispatch: {exc}", file=sys.stderr, flush=True)
            self._give_back(claim, Outcome.CRASHED, f"worker did not start: {exc}", delay_s=1.0)
            return None
        timeout = claim.timeout_s or profile.timeout_s
        self.workers.add(LocalWorker(claim, pid, claim.profile, timeout))
        return pid

    def reap_exited(self) -> None:
        if self.spawner is None:
            return
        while not self.spawner.exits.empty():
            pid, code = self.spawner.exits.get_nowait()
            worker = self.workers.pop(pid)
            if worker is not None:
                rescue.settle_exit(self, worker, code)

    def police_workers(self) -> None:
        """Timeouts, and workers whose card is no longer theirs (cancelled, rescued)."""
        if len(self.workers):
            rescue.police(self, time.monotonic())

    def _give_back(self, claim: Claim, outcome: Outcome, error: str,
                   delay_s: float | None = None) -> None:
        with self.kb.db.write() as conn:
            if claims.is_current(conn, claim.card_id, claim.claim_token):
                transitions.requeue_or_fail(conn, claim.card_id, outcome, error,
                                            now=self.kb.clock(), delay_s=delay_s,
                                            actor=Actor(f"dispatcher:{self.id}",
                                                        claim.claim_token))

    # shutdown
    def shutdown(self) -> None:
        try:
            self._drain()
        finally:
            if self.spawner is not None:
                self.spawner.close()
            if self.watcher is not None:
                self.watcher.close()
            if self.id is not None:
                with self.kb.db.write() as conn:
                    control.stop_dispatcher(conn, self.id, utcnow())

    def _drain(self) -> None:
        """Let running workers finish; hand back what is left on a second signal or timeout."""
        deadline = time.monotonic() + self.opts.drain_timeout_s
        while len(self.workers) and not self.hand_back.is_set() and time.monotonic() < deadline:
            self.reap_exited()
            self.police_workers()
            self.wake.wait(0.05)
            self.wake.clear()
        for worker in self.workers:
            procs.kill_and_confirm(worker.pid, timeout=self.opts.kill_grace_s)
            self._give_back(worker.claim, Outcome.CRASHED, "dispatcher shut down", delay_s=0)
        self.reap_exited()
