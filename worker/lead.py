"""The lead: a card run in the `kanban run` process whose agent delegates to the board."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace

from agent.errors import FatalModelError
from agent.loop import AgentResult, Limits, StopReason, run_agent
from agent.model import resolve_model
from kanban import cards, claims, transitions
from kanban.cards import NewCard
from kanban.children import ChildStatus
from kanban.errors import KanbanError
from kanban.service import Kanban
from state.config import Config
from tools.catalog import REGISTRY
from tools.delegate import LeadScope, cancel_children
from tools.scope import WorkerScope
from worker.heartbeat import HeartbeatThread
from worker.hooks import WorkerHooks
from worker.redact import redact, secrets_in

SYSTEM = """You lead a team of workers on a kanban board.
Split the goal into a few independent subtasks and hand them out with the `delegate` tool
(each: a title, a goal, context; `after` lists earlier tasks of the same call that must finish
first). delegate waits for the workers and returns each child's status and summary.
When you have what you need, answer the goal in plain text; that answer ends your run."""
OFFLINE_LEAD = "scripted:lead-demo"


class LeadHooks(WorkerHooks):
    """A lead's final text is its answer: no reminder."""

    def on_final_text(self, text: str) -> str | None:
        return None


@dataclass(frozen=True)
class LeadResult:
    card_id: int
    answer: str | None
    stop_reason: str
    error: str | None
    children: tuple[int, ...]


def lead_model(config: Config, env: Mapping[str, str], explicit: str | None) -> str:
    """--model, else the `lead` profile's model, else the default profile's real model,
    else (offline) the scripted lead."""
    if explicit:
        return explicit
    lead = config.profiles.get("lead")
    if lead is not None and lead.model:
        return lead.model
    resolved = config.profile("default").resolved_model(env)
    return OFFLINE_LEAD if resolved.startswith("scripted:") else resolved


def children_model(lead_spec: str) -> str | None:
    """Children run on the lead's model; an offline lead's children use their profile's."""
    return None if lead_spec.startswith("scripted:") else lead_spec


def start_lead(kb: Kanban, *, goal: str, context: str, board: str, model: str,
               lease_s: float) -> claims.Claim:
    """Create the lead's card and claim it in one transaction, so no dispatcher takes it."""
    title = goal.strip().splitlines()[0][:200] if goal.strip() else goal
    with kb.db.write() as conn:
        card = cards.add_card(conn, NewCard(title=title, goal=goal, context=context, board=board,
                                            created_by="lead", model=model), kb.clock())
        return claims.claim_card(conn, card.id, now=kb.clock(), lease_s=lease_s,
                                 host=socket.gethostname())


def run_lead(kb: Kanban, claim: claims.Claim, *, config: Config, model_spec: str,
             env: Mapping[str, str] | None = None,
             on_progress: Callable[[list[ChildStatus]], None] | None = None) -> LeadResult:
    """Run the lead agent on its claimed card; Ctrl-C cancels its children and the lead."""
    env = os.environ if env is None else env
    scope = WorkerScope(kb, claim.board, claim.card_id, claim.claim_token, claim.run_id,
                        lease_s=config.limits.lease_s)
    lead = LeadScope(scope, config, children_model(model_spec),
                     on_progress=on_progress or (lambda statuses: None))
    heartbeat = HeartbeatThread(scope)
    heartbeat.start()
    try:
        try:
            model = resolve_model(model_spec, env=env)
        except FatalModelError as exc:
            message = redact(exc.message, secrets_in(env))
            _finish(scope, None, error=message)
            return LeadResult(claim.card_id, None, "error", message, ())
        profile = config.profiles.get("lead", config.profile("default"))
        result = run_agent(model, system=SYSTEM, prompt=_prompt(kb, claim.card_id),
                           toolbox=REGISTRY.toolbox(["delegate"], lead),
                           limits=Limits(max_turns=profile.max_turns,
                                         token_budget=profile.token_budget),
                           hooks=LeadHooks(scope))
        if result.error:  # providers may echo a key back in an error message
            result = replace(result, error=redact(result.error, secrets_in(env)))
    except BaseException:
        with suppress(KanbanError):  # leave the board consistent, whatever stopped us
            cancel_children(lead, lead.delegated, reason="the lead was interrupted")
            with kb.db.write() as conn:
                transitions.cancel(conn, claim.card_id, now=kb.clock(), reason="interrupted",
                                   actor=scope.actor)
        raise
    finally:
        heartbeat.stop()
    return _settle(scope, result, tuple(lead.delegated))


def _prompt(kb: Kanban, card_id: int) -> str:
    card = kb.card(card_id)
    return f"Goal: {card.goal}" + (f"\n\nContext: {card.context}" if card.context else "")


def _settle(scope: WorkerScope, result: AgentResult, delegated: tuple[int, ...]) -> LeadResult:
    answer = (result.text or "").strip() or None
    ok = result.stop_reason in (StopReason.COMPLETED, StopReason.TURN_LIMIT,
                                StopReason.TOKEN_BUDGET)
    error = None if ok and answer else (result.error or f"the lead stopped: {result.stop_reason}")
    _finish(scope, answer if not error else None, error=error)
    return LeadResult(scope.card_id, answer, str(result.stop_reason), error, delegated)


def _finish(scope: WorkerScope, answer: str | None, *, error: str | None) -> None:
    with scope.fenced() as conn:
        if error is None and answer is not None:
            transitions.complete(conn, scope.card_id, answer, now=scope.kb.clock(),
                                 actor=scope.actor)
        else:
            transitions.fail(conn, scope.card_id, error or "no answer", now=scope.kb.clock(),
                             actor=scope.actor)
