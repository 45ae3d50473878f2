"""How a worker's run ends: the exit codes the dispatcher reads, and the outcome a worker
records itself (completed, failed, handed back for another attempt)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from kanban import transitions
from kanban.agent.limits import Limits, StopReason
from kanban.agent.loop import AgentResult
from kanban.errors import KanbanError, LeaseLost
from kanban.state.errors import TransientDatabaseError
from kanban.state.retry import Backoff, HostFaultPatience, retry_transient
from kanban.states import Outcome
from kanban.textsafety import clean_text
from kanban.tools.scope import WorkerScope
from kanban.validation import MAX_SUMMARY
from kanban.worker import gates

T = TypeVar("T")
RETRY = Backoff(first_s=0.1, cap_s=2.0)

EXIT_OK = 0  # the worker recorded the outcome itself
EXIT_FATAL = 3  # a fatal error; the card was failed
EXIT_INFRA = 74  # the database could not be opened or written: the host's fault, not the card's
EXIT_LEASE_LOST = 75  # the lease was lost; nothing more was written
EXIT_BAD_ENV = 78  # the worker was started without its environment


def retrying(scope: WorkerScope, fn: Callable[[], T]) -> T:
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
        scope.step_aside_if_lapsing(exc, delay)
        print(f"kanban worker: database unavailable ({exc}); retrying in {delay:.1f}s",
              file=sys.stderr, flush=True)

    return retry_transient(attempt, backoff=RETRY, on_retry=HostFaultPatience(then=say))


def settle(scope: WorkerScope, result: AgentResult, limits: Limits = Limits()) -> int:
    """Record how the run ended, unless a tool already finished the card."""
    print(f"agent stopped: {result.stop_reason} after {result.turns} turns"
          f" ({result.spent()})", flush=True)
    if scope.finished:
        return EXIT_OK
    if result.stop_reason == StopReason.INTERRUPTED:
        return EXIT_LEASE_LOST  # the card is no longer ours: write nothing
    if result.stop_reason == StopReason.COMPLETED:
        # The model's last text as it is would be refused (controls, size): fit it instead.
        text = clean_text(result.text or "", MAX_SUMMARY - 6000).strip()
        summary = scope.on_complete(text or "(the agent ended without a summary)")
        verdict = gates.verdict(scope)
        retrying(scope, lambda: scope.kb.complete(scope.card_id, summary, actor=scope.actor,
                                                   implicit=True, gated=scope.gated,
                                                   verdict=verdict))
        return EXIT_OK
    if result.stop_reason == StopReason.ERROR and result.fatal:
        return fail(scope, result.error or "fatal model error")
    if result.stop_reason == StopReason.ERROR:
        scope.write(lambda conn: transitions.requeue_or_fail(
            conn, scope.card_id, Outcome.FAILED, result.error or "model error",
            now=scope.kb.clock(), actor=scope.actor))
        return EXIT_OK
    note = f"; last summary: {clean_text(result.text, 2000).strip()}" if result.text else ""
    return fail(scope, f"{_limit_text(result, limits)} before the card was finished{note}",
                 code=EXIT_OK)


def _limit_text(result: AgentResult, limits: Limits) -> str:
    if result.stop_reason == StopReason.COST_BUDGET and limits.max_cost is not None:
        spent = limits.spent_cost + result.cost
        return f"cost budget reached (${spent:.4f} spent of max_cost ${limits.max_cost:.4f})"
    if result.stop_reason == StopReason.TOKEN_BUDGET and limits.token_budget is not None:
        return (f"token budget reached ({result.usage.total_tokens:,} of "
                f"{limits.token_budget:,} tokens)")
    return str(result.stop_reason).replace("_", " ") + " reached"


def requeue(scope: WorkerScope, message: str) -> int:
    print(f"card #{scope.card_id}: {message}", file=sys.stderr, flush=True)
    scope.write(lambda conn: transitions.requeue_or_fail(
        conn, scope.card_id, Outcome.FAILED, message, now=scope.kb.clock(), actor=scope.actor))
    return EXIT_OK


def fail(scope: WorkerScope, message: str, *, code: int = EXIT_FATAL) -> int:
    print(f"failing card #{scope.card_id}: {message}", file=sys.stderr, flush=True)
    try:
        scope.write(lambda conn: transitions.fail(conn, scope.card_id, message,
                                                  now=scope.kb.clock(), actor=scope.actor))
    except KanbanError as exc:
        print(f"could not record the failure: {exc}", file=sys.stderr, flush=True)
    return code


