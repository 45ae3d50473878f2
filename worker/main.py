"""One worker process: run one card's agent under a lease and report how it ended.

Exit codes tell the dispatcher what the worker already recorded (see EXIT_*).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace

from agent.errors import FatalModelError
from agent.loop import AgentResult, Limits, StopReason, run_agent
from agent.model import resolve_model
from kanban import transitions
from kanban.errors import KanbanError
from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.states import Outcome
from state import open_database
from state.config import Config, load_config
from state.engine import Database
from state.errors import ConfigError
from state.paths import DbLocation
from tools.catalog import REGISTRY
from tools.scope import WorkerScope
from worker.heartbeat import HeartbeatThread
from worker.hooks import WorkerHooks
from worker.prompts import SYSTEM, first_prompt
from worker.redact import redact, secrets_in

EXIT_OK = 0  # the worker recorded the outcome itself
EXIT_FATAL = 3  # a fatal error; the card was failed
EXIT_LEASE_LOST = 75  # the lease was lost; nothing more was written
EXIT_BAD_ENV = 78  # the worker was started without its environment


@dataclass(frozen=True)
class WorkerEnv:
    """The five variables the dispatcher hands every worker."""

    db: str
    board: str
    card_id: int
    claim_token: str
    run_id: int
    lease_s: float

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerEnv:
        try:
            return cls(env["KANBAN_DB"], env["KANBAN_BOARD"], int(env["KANBAN_CARD"]),
                       env["KANBAN_CLAIM_TOKEN"], int(env["KANBAN_RUN"]),
                       float(env.get("KANBAN_LEASE_S", "30")))
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"worker environment incomplete: {exc}") from None


def main(env: Mapping[str, str] | None = None, *, db: Database | None = None) -> int:
    """Run the card named by the environment; `db` is a warm database from a forkserver."""
    env = os.environ if env is None else env
    try:
        wenv = WorkerEnv.from_env(env)
    except ConfigError as exc:
        print(f"kanban worker: {exc}", file=sys.stderr)
        return EXIT_BAD_ENV
    location = DbLocation(wenv.db, "env")
    db = db or open_database(location)
    try:
        return run_card(Kanban(db), wenv, load_config(location.home / "config.toml"), env)
    finally:
        db.dispose()


def _lease_lost(message: str) -> None:
    print(f"kanban worker: {message}", file=sys.stderr, flush=True)
    os._exit(EXIT_LEASE_LOST)


def run_card(kb: Kanban, wenv: WorkerEnv, config: Config, env: Mapping[str, str]) -> int:
    """The worker's steps: scope, heartbeat, model, agent, outcome."""
    limits = config.limits
    scope = WorkerScope(kb, wenv.board, wenv.card_id, wenv.claim_token, wenv.run_id,
                        lease_s=wenv.lease_s, max_depth=limits.max_depth,
                        max_children_per_card=limits.max_children_per_card,
                        on_lease_lost=_lease_lost)
    secrets = secrets_in(env)
    heartbeat = HeartbeatThread(scope)
    heartbeat.start()
    try:
        card = kb.card(wenv.card_id)
        try:
            profile = config.profile(card.profile)
            model = resolve_model(card.model or profile.resolved_model(env), env=env,
                                  base_url=profile.base_url)
            toolbox = REGISTRY.toolbox(_toolsets(card, profile.toolsets), scope)
        except (FatalModelError, ConfigError) as exc:
            return _fail(scope, redact(exc.message, secrets))
        print(f"card #{card.id} attempt {card.attempt}: model {model.name}", flush=True)
        max_turns = profile.max_turns
        if card.parent_id is not None:  # a delegated card: the delegation limits apply too
            max_turns = min(max_turns, limits.child_max_turns)
        result = run_agent(model, system=SYSTEM, prompt=first_prompt(card), toolbox=toolbox,
                           limits=Limits(max_turns=max_turns,
                                         token_budget=profile.token_budget),
                           hooks=WorkerHooks(scope))
        if result.error:  # providers may echo a key back in an error message
            result = replace(result, error=redact(result.error, secrets))
        return settle(scope, result)
    finally:
        heartbeat.stop()


def _toolsets(card: CardRecord, default: tuple[str, ...]) -> list[str]:
    chosen = card.toolsets.split(",") if card.toolsets else list(default)
    known = set(REGISTRY.toolsets())
    # A worker never gets tools outside the registry's worker-safe sets.
    return [t for t in chosen if t in known and t != "delegate"]


def settle(scope: WorkerScope, result: AgentResult) -> int:
    """Record how the run ended, unless a tool already finished the card."""
    print(f"agent stopped: {result.stop_reason} after {result.turns} turns", flush=True)
    if scope.finished:
        return EXIT_OK
    if result.stop_reason == StopReason.COMPLETED:
        summary = (result.text or "").strip() or "(the agent ended without a summary)"
        with scope.fenced() as conn:
            transitions.complete(conn, scope.card_id, summary, now=scope.kb.clock(),
                                 actor=scope.actor, implicit=True)
        return EXIT_OK
    if result.stop_reason == StopReason.ERROR and result.fatal:
        return _fail(scope, result.error or "fatal model error")
    if result.stop_reason == StopReason.ERROR:
        with scope.fenced() as conn:
            transitions.requeue_or_fail(conn, scope.card_id, Outcome.FAILED,
                                        result.error or "model error", now=scope.kb.clock(),
                                        actor=scope.actor)
        return EXIT_OK
    limit = str(result.stop_reason).replace("_", " ")
    note = f"; last summary: {result.text.strip()[:2000]}" if result.text else ""
    return _fail(scope, f"{limit} reached before the card was finished{note}", code=EXIT_OK)


def _fail(scope: WorkerScope, message: str, *, code: int = EXIT_FATAL) -> int:
    print(f"failing card #{scope.card_id}: {message}", file=sys.stderr, flush=True)
    try:
        with scope.fenced() as conn:
            transitions.fail(conn, scope.card_id, message, now=scope.kb.clock(),
                             actor=scope.actor)
    except KanbanError as exc:
        print(f"could not record the failure: {exc}", file=sys.stderr, flush=True)
    return code




if __name__ == "__main__":
    sys.exit(main())


__all__ = ["EXIT_FATAL", "EXIT_LEASE_LOST", "EXIT_OK", "WorkerEnv", "main", "run_card"]
