"""One worker process: run one card's agent under a lease and report how it ended.

Exit codes tell the dispatcher what the worker already recorded (see EXIT_*).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

from kanban.attachments import Attachments
from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.state import open_database
from kanban.state.config import Config
from kanban.state.errors import ConfigError, DatabaseError
from kanban.state.paths import DbLocation
from kanban.state.pg_fleet import SLOTS_ENV
from kanban.state.retry import retry_transient
from kanban.state.sqlite import BUSY_SLICE_S
from kanban.state.store import Database
from kanban.tools.runner import PlainRunner, Runner
from kanban.tools.scope import WorkerScope
from kanban.triage import TRIAGED_ROLE
from kanban.worker import gates, tracing, warm
from kanban.worker.agent_card import Setting, run_agent_card
from kanban.worker.env import WorkerEnv
from kanban.worker.handoff import receive
from kanban.worker.heartbeat import HeartbeatThread
from kanban.worker.materials import place_materials
from kanban.worker.outcome import (
    EXIT_BAD_ENV,
    EXIT_FATAL,
    EXIT_INFRA,
    EXIT_LEASE_LOST,
    EXIT_OK,
    fail,
    retrying,
)
from kanban.worker.sandboxing import harden
from kanban.worker.script import run_script
from kanban.worker.watchdog import Watchdog

HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT})


def main(env: Mapping[str, str] | None = None, *, db: Database | None = None) -> int:
    """Run the card named by the environment; `db` is a warm database from a forkserver."""
    if env is None:
        env = dict(os.environ)
        receive(env)  # a forked worker's credentials, past the forkserver
        harden(os.environ)
    try:
        wenv = WorkerEnv.from_env(env)
    except ConfigError as exc:
        print(f"kanban worker: {exc}", file=sys.stderr)
        return EXIT_BAD_ENV
    location = DbLocation(wenv.db, "env")
    runner = PlainRunner()
    _stop_commands_on_sigterm(runner)
    try:
        db = db or retry_transient(lambda: open_database(location),
                                   patience_s=min(5.0, wenv.lease_s / 2))
    except DatabaseError as exc:
        return _infrastructure(exc)
    _fit_patience(db, wenv.lease_s)
    db.for_worker(env.get(SLOTS_ENV))
    try:
        kb = Kanban(db)
        try:
            config = warm.config(env)
        except ConfigError as exc:  # never a quiet fallback to defaults (or the demo model)
            return fail(_scope(kb, wenv, None), f"config: {exc.message}")
        return run_card(kb, wenv, config, env, runner=runner, home=location.home)
    except DatabaseError as exc:
        return _infrastructure(exc)
    except OSError as exc:
        if exc.errno not in HOST_ERRNOS:
            raise
        return _infrastructure(DatabaseError(f"{exc.strerror} ({exc.filename or 'a file'})"))
    finally:
        db.dispose()


def _fit_patience(db: Database, lease_s: float) -> None:
    """A write waits a fraction of the lease at a time: the lease is checked between tries.
    A connection opened before the lease was known (by a forkserver's spare) is closed if
    its busy wait was set longer."""
    before = db.patience_s
    db.patience_s = min(before, max(0.5, lease_s / 6))
    if min(db.patience_s, BUSY_SLICE_S) < min(before, BUSY_SLICE_S):
        db.dispose()


def _infrastructure(exc: DatabaseError) -> int:
    """The host failed the worker (database unwritable, full or corrupt; a full disk): one
    line for the dispatcher, which hands the card back without spending an attempt."""
    with suppress(OSError):  # the log may be on the full disk
        print(f"kanban worker: database: {exc.message}", file=sys.stderr, flush=True)
    return EXIT_INFRA


def _stop_commands_on_sigterm(runner: Runner) -> None:
    """A cancelled or timed-out card's worker gets SIGTERM: its commands (each in its own
    process group) die with it. The killing runs in a thread so the handler never waits on
    a lock the interrupted main thread holds."""

    def stop(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)  # (only the main thread may) a second one kills

        def cancel_then_exit() -> None:
            try:
                runner.cancel_all()
            finally:  # die of the signal itself, as the dispatcher expects
                os.kill(os.getpid(), signum)
                os._exit(128 + signum)

        threading.Thread(target=cancel_then_exit, name="stop-commands", daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def _lease_lost(message: str) -> None:
    print(f"kanban worker: {message}", file=sys.stderr, flush=True)
    os._exit(EXIT_LEASE_LOST)


def _cut_off(message: str) -> None:
    """The dispatcher reads this line as the reason it hands the card back (exit 74)."""
    print(f"kanban worker: {message}", file=sys.stderr, flush=True)
    os._exit(EXIT_INFRA)


def _scope(kb: Kanban, wenv: WorkerEnv, config: Config | None) -> WorkerScope:
    limits = (config or Config()).limits
    return WorkerScope(kb, wenv.board, wenv.card_id, wenv.claim_token, wenv.run_id,
                       lease_s=wenv.lease_s, max_depth=limits.max_depth,
                       max_children_per_card=limits.max_children_per_card,
                       on_lease_lost=_lease_lost, on_cut_off=_cut_off,
                       lease_until=wenv.lease_until)


def run_card(kb: Kanban, wenv: WorkerEnv, config: Config, env: Mapping[str, str], *,
             runner: Runner | None = None, home: Path | None = None) -> int:
    """The worker's steps: scope, watchdog, the card, then its script or its agent."""
    setting = Setting(runner=runner or PlainRunner(), started=time.monotonic(),
                      home=home or DbLocation(wenv.db, "env").home)
    scope = _scope(kb, wenv, config)
    if wenv.timeout_s:  # kept by the heartbeat threads the card's steps start
        scope.deadline = Watchdog(scope, wenv.timeout_s)
    tracer = tracing.start(config, env)  # None unless telemetry is on (docs/traces.md)
    try:
        card = retrying(scope, lambda: kb.card(wenv.card_id))
        return tracing.traced(
            tracer, scope, card,
            lambda trace: _run_kind(scope, card, wenv, config, env, replace(setting, trace=trace)),
            lambda code: (scope.finished or f"exit {code}", code != EXIT_OK))
    finally:
        scope.deadline = None
        if tracer is not None:
            tracer.shutdown()  # what is buffered goes out before the worker exits


def _run_kind(scope: WorkerScope, card: CardRecord, wenv: WorkerEnv, config: Config,
              env: Mapping[str, str], setting: Setting) -> int:
    """A script, a triaged card's roll-up, or an agent."""
    if card.command is not None:  # a script card: a command, no model
        return _run_script_card(scope, card, wenv, env, setting.runner)
    if card.role == TRIAGED_ROLE:  # its children finished: their results are its own
        gates.roll_up(scope, card)
        return EXIT_OK
    return run_agent_card(scope, card, wenv, config, env, setting)


def _run_script_card(scope: WorkerScope, card: CardRecord, wenv: WorkerEnv,
                     env: Mapping[str, str], runner: Runner) -> int:
    # Renewals only: a cancel reaches a script through the dispatcher's SIGTERM, which
    # also stops the script's own process group.
    heartbeat = HeartbeatThread(scope)
    heartbeat.start()
    try:
        home = DbLocation(wenv.db, "env").home
        # its attachments too are in its workspace, read-only
        place_materials(Attachments(scope.kb.db, home, clock=scope.kb.clock), card.id, [],
                        Path.cwd())
        return run_script(scope, card, home=home, env=env, runner=runner)
    finally:
        heartbeat.stop()


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["EXIT_FATAL", "EXIT_INFRA", "EXIT_LEASE_LOST", "EXIT_OK", "WorkerEnv", "main",
           "run_card"]
