"""One worker process: run one card's agent under a lease and report how it ended.

Exit codes tell the dispatcher what the worker already recorded (see EXIT_*).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from kanban import transitions
from kanban.agent.errors import FatalModelError
from kanban.agent.interrupt import Interrupt
from kanban.agent.limits import Limits, StopReason
from kanban.agent.loop import AgentResult
from kanban.agent.scripted import resume_scripts
from kanban.agent.types import Message
from kanban.attachments import Attachments
from kanban.children import tree_budget_spent
from kanban.errors import KanbanError, LeaseLost, ValidationError
from kanban.events import record_event
from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.state import open_database
from kanban.state.config import Config
from kanban.state.errors import ConfigError, DatabaseError, TransientDatabaseError
from kanban.state.paths import DbLocation
from kanban.state.retry import Backoff, HostFaultPatience, retry_transient
from kanban.state.sqlite import BUSY_SLICE_S
from kanban.state.store import Database
from kanban.states import Outcome
from kanban.textsafety import clean_text
from kanban.tools.runner import PlainRunner, Runner
from kanban.tools.scope import WorkerScope
from kanban.triage import TRIAGED_ROLE
from kanban.validation import MAX_SUMMARY
from kanban.worker import gates, warm
from kanban.worker import toolbox as tools
from kanban.worker.activity import Activity
from kanban.worker.handoff import receive
from kanban.worker.heartbeat import HeartbeatThread
from kanban.worker.materials import place_materials
from kanban.worker.orchestrator import opening, orchestrator_scope, wait
from kanban.worker.plan import WorkerPlan, prepare_run
from kanban.worker.redact import redact, secrets_in
from kanban.worker.resume import stored_conversation
from kanban.worker.runtime import build_runtime, key_values
from kanban.worker.sandboxing import card_network, choose_runner, harden
from kanban.worker.script import run_script
from kanban.worker.watchdog import Watchdog
from kanban.workspaces import WORKSPACE_ENV, WORKTREE, Workspace

T = TypeVar("T")
RETRY = Backoff(first_s=0.1, cap_s=2.0)
COMMAND_TOOLSETS = ("terminal",)  # toolsets whose tools start commands

EXIT_OK = 0  # the worker recorded the outcome itself
EXIT_FATAL = 3  # a fatal error; the card was failed
# The host's faults, not the card's: no space, read-only file system, I/O, quota.
HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT})
EXIT_INFRA = 74  # the database could not be opened or written: the host's fault, not the card's
EXIT_LEASE_LOST = 75  # the lease was lost; nothing more was written
EXIT_BAD_ENV = 78  # the worker was started without its environment


@dataclass(frozen=True)
class WorkerEnv:
    """The variables the dispatcher hands every worker (its config path is read apart)."""

    db: str
    board: str
    card_id: int
    claim_token: str
    run_id: int
    lease_s: float
    lease_until: datetime | None = None  # the claim's lease, by the store's clock
    timeout_s: float | None = None  # the card's timeout, enforced by itself if orphaned
    workspace: Workspace | None = None  # as the dispatcher resolved it (else read here)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerEnv:
        try:
            until = env.get("KANBAN_LEASE_UNTIL")
            timeout = env.get("KANBAN_TIMEOUT_S")
            workspace = env.get(WORKSPACE_ENV)
            return cls(env["KANBAN_DB"], env["KANBAN_BOARD"], int(env["KANBAN_CARD"]),
                       env["KANBAN_CLAIM_TOKEN"], int(env["KANBAN_RUN"]),
                       float(env.get("KANBAN_LEASE_S", "30")),
                       datetime.fromisoformat(until) if until else None,
                       float(timeout) if timeout else None,
                       Workspace.from_json(json.loads(workspace)) if workspace else None)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"worker environment incomplete: {exc}") from None


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
    try:
        kb = Kanban(db)
        try:
            config = warm.config(env)
        except ConfigError as exc:  # never a quiet fallback to defaults (or the demo model)
            return _fail(_scope(kb, wenv, None), f"config: {exc.message}")
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


def _scope(kb: Kanban, wenv: WorkerEnv, config: Config | None) -> WorkerScope:
    limits = (config or Config()).limits
    return WorkerScope(kb, wenv.board, wenv.card_id, wenv.claim_token, wenv.run_id,
                       lease_s=wenv.lease_s, max_depth=limits.max_depth,
                       max_children_per_card=limits.max_children_per_card,
                       on_lease_lost=_lease_lost, lease_until=wenv.lease_until)


def run_card(kb: Kanban, wenv: WorkerEnv, config: Config, env: Mapping[str, str], *,
             runner: Runner | None = None, home: Path | None = None) -> int:
    """The worker's steps: scope, watchdog, the card, then its script or its agent."""
    setting = Setting(runner=runner or PlainRunner(), started=time.monotonic(),
                      home=home or DbLocation(wenv.db, "env").home)
    scope = _scope(kb, wenv, config)
    if wenv.timeout_s:  # kept by the heartbeat threads the card's steps start
        scope.deadline = Watchdog(scope, wenv.timeout_s)
    try:
        card = _retrying(scope, lambda: kb.card(wenv.card_id))
        if card.command is not None:  # a script card: a command, no model
            return _run_script_card(scope, card, wenv, env, setting.runner)
        if card.role == TRIAGED_ROLE:  # its children finished: their results are its own
            gates.roll_up(scope, card)
            return EXIT_OK
        return _run_agent_card(scope, card, wenv, config, env, setting)
    finally:
        scope.deadline = None


def _retrying(scope: WorkerScope, fn: Callable[[], T]) -> T:
    """fn, tried again while the database is away; it ends when the lease runs out (the
    next fenced write then raises LeaseLost and the worker stops)."""

    def attempt() -> T:
        try:
            scope.check_lease()
            return fn()
        except LeaseLost as exc:
            scope.on_lease_lost(exc.message)
            raise

    def say(exc: TransientDatabaseError, delay: float) -> None:
        print(f"kanban worker: database unavailable ({exc}); retrying in {delay:.1f}s",
              file=sys.stderr, flush=True)

    return retry_transient(attempt, backoff=RETRY, on_retry=HostFaultPatience(then=say))


@dataclass(frozen=True)
class Setting:
    """Where and with what the card's tools work."""

    runner: Runner
    home: Path  # the board's folder: workspaces/, logs/, config.toml
    started: float  # time.monotonic() when the worker began: the card's time runs from it


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


def _run_agent_card(scope: WorkerScope, card: CardRecord, wenv: WorkerEnv, config: Config,
                    env: Mapping[str, str], setting: Setting) -> int:
    """Watch thread, workspace, runtime, tools, agent, outcome."""
    secrets = secrets_in(env)
    activity, interrupt = Activity(max_turns=0), Interrupt()
    heartbeat = HeartbeatThread(scope, activity=activity, interrupt=interrupt)
    heartbeat.start()
    bench = None
    try:
        try:
            profile = config.profile(card.profile)
            secrets = sorted({*secrets, *key_values(profile, env)}, key=len, reverse=True)
            # Reads of the board: tried again while the database is away
            workspace = wenv.workspace or _retrying(scope, lambda: scope.kb.workspace(
                card.id, setting.home, config.workspaces()))
            plan = _retrying(scope, lambda: _prepare(scope.kb, card, config, env,
                                                     home=setting.home,
                                                     workspace=workspace.path))
            scope.skills = {skill.name: skill for skill in plan.skills}
            scope.skill_files = plan.materials.skill_files
            activity.plan(plan.max_turns)
            runtime = build_runtime(
                config, plan.profile, spec=plan.model, env=env, interrupt=interrupt,
                max_turns=plan.max_turns, spent_cost=plan.limits.spent_cost,
                workspace=workspace.path, hook_context=_hook_context(card, wenv))
            runner = _command_runner(scope, card, config, plan, setting, workspace.path)
        except (FatalModelError, ConfigError, ValidationError) as exc:
            # credentials, an unknown model, profile or toolset, a skill that no longer
            # exists, a workspace that cannot be resolved
            heartbeat.stop()
            return _fail(scope, redact(exc.message, secrets))
        bench = tools.workbench(card, plan.profile, config, scope=scope, workspace=workspace,
                                env=env, runner=runner, started=setting.started)
        if workspace.kind == WORKTREE:
            scope.on_complete = _worktree_note(workspace, card.id, card.title)
        gates.arm(scope, card, bench)
        lead = orchestrator_scope(scope, card, plan, config, setting.home)
        try:
            toolbox = tools.toolbox(list(plan.toolsets), config, scope, bench,
                                    orchestrator=lead)
        except ConfigError as exc:  # a plug-in that does not load
            heartbeat.stop()
            return _fail(scope, redact(exc.message, secrets))
        except KanbanError as exc:  # an MCP server that does not start: try again later
            heartbeat.stop()
            return _requeue(scope, redact(exc.message, secrets))
        spent = _retrying(scope, lambda: _tree_spent(scope.kb, card, config))
        if spent:  # a child may not start once its tree's budget is gone
            heartbeat.stop()
            return _fail(scope, f"not started: {spent}", code=EXIT_OK)
        restored = _retrying(scope, lambda: _stored(scope.kb, card, wenv.run_id))
        print(f"card #{card.id} attempt {card.attempt}: model {runtime.model.name}, toolsets "
              f"{','.join(plan.toolsets)}{', delegate' if lead else ''}, workspace "
              f"{workspace.path}"
              + (f"; resuming {len(restored)} stored messages" if restored else ""), flush=True)
        if restored:  # an offline script goes on where the stored answers leave it
            resume_scripts(runtime.model, sum(m.role == "assistant" for m in restored))
        start = opening(scope, card, plan, lead, restored, activity, secrets)
        result = runtime.run(system=start.system, prompt=start.prompt,
                             toolbox=tools.RedactingToolbox(toolbox, secrets), hooks=start.hooks)
    finally:
        heartbeat.stop()  # settling gives the lease up: the watch must not mistake that
        if bench is not None and bench.mcp is not None:
            bench.mcp.close()
    if result.error:  # providers may echo a key back in an error message
        result = replace(result, error=redact(result.error, secrets))
    if lead is not None and lead.delegation is not None and not scope.finished:
        wait(scope, lead.delegation, result)
        return EXIT_OK
    return settle(scope, result, runtime.limits)


def _command_runner(scope: WorkerScope, card: CardRecord, config: Config, plan: WorkerPlan,
                    setting: Setting, workspace: Path) -> Runner:
    """The sandbox (or the plain runner) for the card's commands and MCP servers, said in
    the worker's log and, for cards that run commands, in the run's events."""
    network = _retrying(scope, lambda: card_network(scope.kb, card, plan.profile, config))
    choice = choose_runner(setting.runner, plan.profile, network=network,
                           workspace=workspace, home=setting.home)
    print(f"card #{card.id}: {choice.note}", flush=True)
    if any(t in COMMAND_TOOLSETS or t.startswith("mcp:") for t in plan.toolsets):
        scope.write(lambda conn: record_event(
            conn, board=scope.board, card_id=scope.card_id, run_id=scope.run_id,
            kind="sandbox", actor=scope.actor.name, at=scope.kb.clock(),
            runner=choice.runner.name, note=choice.note))
    return choice.runner


def _tree_spent(kb: Kanban, card: CardRecord, config: Config) -> str | None:
    if card.parent_id is None:
        return None  # a root's own budget is its profile's (token_budget, max_cost)
    with kb.db.read() as conn:
        return tree_budget_spent(conn, card.id, config)


def _stored(kb: Kanban, card: CardRecord, run_id: int) -> list[Message] | None:
    with kb.db.read() as conn:
        return stored_conversation(conn, card, run_id)


def _prepare(kb: Kanban, card: CardRecord, config: Config, env: Mapping[str, str], *,
             home: Path, workspace: Path) -> WorkerPlan:
    """The plan, with attachments and skill files copied into the workspace."""
    attachments = Attachments(kb.db, home, clock=kb.clock)
    return prepare_run(attachments, card, config, env, home=home, workspace=workspace)


def _worktree_note(workspace: Workspace, card_id: int, title: str) -> Callable[[str], str]:
    """Commit the worktree when the card completes and add its branch to the summary."""

    def note(summary: str) -> str:
        from kanban.tools import worktree

        try:
            described = worktree.finish(workspace, f"kanban #{card_id}: {title}")
        except KanbanError as exc:
            described = f"Workspace: git worktree {workspace.path}; could not commit: {exc}"
        return f"{summary}\n\n{described[:5000]}"

    return note


def _hook_context(card: CardRecord, wenv: WorkerEnv) -> dict[str, object]:
    """What user hooks are told about the run."""
    return {"card_id": card.id, "board": card.board, "run_id": wenv.run_id,
            "attempt": card.attempt, "profile": card.profile, "title": card.title}


def settle(scope: WorkerScope, result: AgentResult, limits: Limits = Limits()) -> int:
    """Record how the run ended, unless a tool already finished the card."""
    print(f"agent stopped: {result.stop_reason} after {result.turns} turns"
          f" (${result.cost:.4f})", flush=True)
    if scope.finished:
        return EXIT_OK
    if result.stop_reason == StopReason.INTERRUPTED:
        return EXIT_LEASE_LOST  # the card is no longer ours: write nothing
    if result.stop_reason == StopReason.COMPLETED:
        # The model's last text as it is would be refused (controls, size): fit it instead.
        text = clean_text(result.text or "", MAX_SUMMARY - 6000).strip()
        summary = scope.on_complete(text or "(the agent ended without a summary)")
        verdict = gates.verdict(scope)
        _retrying(scope, lambda: scope.kb.complete(scope.card_id, summary, actor=scope.actor,
                                                   implicit=True, gated=scope.gated,
                                                   verdict=verdict))
        return EXIT_OK
    if result.stop_reason == StopReason.ERROR and result.fatal:
        return _fail(scope, result.error or "fatal model error")
    if result.stop_reason == StopReason.ERROR:
        scope.write(lambda conn: transitions.requeue_or_fail(
            conn, scope.card_id, Outcome.FAILED, result.error or "model error",
            now=scope.kb.clock(), actor=scope.actor))
        return EXIT_OK
    note = f"; last summary: {clean_text(result.text, 2000).strip()}" if result.text else ""
    return _fail(scope, f"{_limit_text(result, limits)} before the card was finished{note}",
                 code=EXIT_OK)


def _limit_text(result: AgentResult, limits: Limits) -> str:
    if result.stop_reason == StopReason.COST_BUDGET and limits.max_cost is not None:
        spent = limits.spent_cost + result.cost
        return f"cost budget reached (${spent:.4f} spent of max_cost ${limits.max_cost:.4f})"
    if result.stop_reason == StopReason.TOKEN_BUDGET and limits.token_budget is not None:
        return (f"token budget reached ({result.usage.total_tokens:,} of "
                f"{limits.token_budget:,} tokens)")
    return str(result.stop_reason).replace("_", " ") + " reached"


def _requeue(scope: WorkerScope, message: str) -> int:
    print(f"card #{scope.card_id}: {message}", file=sys.stderr, flush=True)
    scope.write(lambda conn: transitions.requeue_or_fail(
        conn, scope.card_id, Outcome.FAILED, message, now=scope.kb.clock(), actor=scope.actor))
    return EXIT_OK


def _fail(scope: WorkerScope, message: str, *, code: int = EXIT_FATAL) -> int:
    print(f"failing card #{scope.card_id}: {message}", file=sys.stderr, flush=True)
    try:
        scope.write(lambda conn: transitions.fail(conn, scope.card_id, message,
                                                  now=scope.kb.clock(), actor=scope.actor))
    except KanbanError as exc:
        print(f"could not record the failure: {exc}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["EXIT_FATAL", "EXIT_INFRA", "EXIT_LEASE_LOST", "EXIT_OK", "WorkerEnv", "main",
           "run_card"]
