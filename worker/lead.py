"""The lead: a card run in the `kanban run` process whose agent delegates to the board."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from kanban import cards, claims, transitions
from kanban.agent.errors import FatalModelError
from kanban.agent.interrupt import Interrupt
from kanban.agent.limits import StopReason
from kanban.agent.loop import AgentResult
from kanban.agent.tracing import RunTrace
from kanban.cards import NewCard
from kanban.children import ChildStatus, Delegation
from kanban.dispatcher.wake import change_watcher
from kanban.errors import KanbanError
from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.signals import critical
from kanban.skills import SkillCatalog
from kanban.state.config import Config
from kanban.state.errors import ConfigError
from kanban.textsafety import clean_text
from kanban.tools import delegate
from kanban.tools.delegate import LEAD_PROFILE, LeadScope
from kanban.tools.registry import Toolbox
from kanban.tools.scope import WorkerScope
from kanban.validation import MAX_SUMMARY
from kanban.worker import tracing
from kanban.worker.activity import Activity
from kanban.worker.heartbeat import HeartbeatThread
from kanban.worker.hooks import WorkerHooks
from kanban.worker.redact import redact, secrets_in
from kanban.worker.runtime import build_runtime, key_values
from kanban.worker.toolbox import RedactingToolbox
from kanban.worker.transcript import transcript_caps

LEAD_SYSTEM = """You lead a team of workers on a kanban board.
Split the goal into a few independent subtasks and hand them out with the `delegate` tool
(each: a title, a goal, context; `after` lists earlier tasks of the same call that must finish
first; `profile` picks who does it, and its description says what that worker can do).
delegate's result, once the workers have finished, is each child's status and summary.
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
    usage: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0


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


def usable_lead_model(config: Config, env: Mapping[str, str], explicit: str | None) -> str:
    """The lead's model spec, refused now (before anything is stored) if it is unknown or
    its API key is missing: built as the lead's worker builds it (its profile's base_url,
    api and api_key_env), without calling it."""
    from kanban.worker.runtime import model_chain

    spec = lead_model(config, env, explicit)
    built = model_chain(config.profiles.get(LEAD_PROFILE, config.profile("default")), spec,
                        env)
    close = getattr(built, "close", None)
    if close is not None:
        close()
    return spec


def children_model(lead_spec: str) -> str | None:
    """Children run on the lead's model; an offline lead's children use their profile's."""
    return None if lead_spec.startswith("scripted:") else lead_spec


def lead_card(goal: str, context: str, board: str, model: str) -> NewCard:
    """The lead's card: an orchestrator any dispatcher's worker can run or resume."""
    title = goal.strip().splitlines()[0][:200] if goal.strip() else goal
    return NewCard(title=title, goal=goal, context=context, board=board, created_by="lead",
                   model=model, profile=LEAD_PROFILE, role="orchestrator")


def add_lead(kb: Kanban, *, goal: str, context: str, board: str, model: str) -> int:
    """The lead's card, ready for a dispatcher (`kanban run --detach`)."""
    with kb.db.write() as conn:
        return cards.add_card(conn, lead_card(goal, context, board, model), kb.clock()).id


def start_lead(kb: Kanban, *, goal: str, context: str, board: str, model: str,
               lease_s: float) -> claims.Claim:
    """Create the lead's card and claim it in one transaction, so no dispatcher takes it."""
    with kb.db.write() as conn:
        card = cards.add_card(conn, lead_card(goal, context, board, model), kb.clock())
        return claims.claim_card(conn, card.id, now=kb.clock(), lease_s=lease_s,
                                 host=socket.gethostname())


def run_lead(kb: Kanban, claim: claims.Claim, *, config: Config, model_spec: str,
             env: Mapping[str, str] | None = None,
             on_progress: Callable[[list[ChildStatus]], None] | None = None,
             skills: SkillCatalog | None = None, home: Path | None = None,
             keep_served: Callable[[], bool] | None = None) -> LeadResult:
    """Run the lead agent on its claimed card; Ctrl-C leaves it resumable (see
    leave_resumable). `home` is the board's folder (relative `dir:` workspaces start at its
    parent); `keep_served` starts a dispatcher when none serves the board any more."""
    env = os.environ if env is None else env
    scope = WorkerScope(kb, claim.board, claim.card_id, claim.claim_token, claim.run_id,
                        lease_s=config.limits.lease_s)
    lead = LeadScope(scope, config, children_model(model_spec),
                     on_progress=on_progress or (lambda statuses: None),
                     skills=skills or SkillCatalog(),
                     home=home.parent if home is not None else Path.cwd())
    profile = config.profiles.get(LEAD_PROFILE, config.profile("default"))
    secrets = sorted({*secrets_in(env), *key_values(profile, env)}, key=len, reverse=True)
    activity, interrupt = Activity(max_turns=profile.max_turns), Interrupt()
    heartbeat = HeartbeatThread(scope, activity=activity, interrupt=interrupt)
    watcher, woken = change_watcher(kb.db), threading.Event()
    lead.wait_change = lambda timeout: watcher.wait(timeout, woken)  # children's changes wake
    if keep_served is not None:
        lead.keep_served = keep_served
    heartbeat.start()
    tracer = tracing.start(config, env)  # None unless telemetry is on (docs/traces.md)
    run = _LeadRun(lead, claim, config, model_spec, env, secrets, activity, interrupt,
                   heartbeat)
    try:
        return tracing.traced(tracer, scope, kb.card(claim.card_id), run.run,
                              lambda done: (done.stop_reason, done.error is not None))
    finally:
        heartbeat.stop()
        watcher.close()
        if tracer is not None:
            tracer.shutdown()


@dataclass(frozen=True)
class _LeadRun:
    """What the lead's agent runs with."""

    lead: LeadScope
    claim: claims.Claim
    config: Config
    model_spec: str
    env: Mapping[str, str]
    secrets: list[str]
    activity: Activity
    interrupt: Interrupt
    heartbeat: HeartbeatThread

    def run(self, trace: RunTrace) -> LeadResult:
        """The agent's run, then its outcome settled once the heartbeat has stopped (settling
        gives the lease up: the watch must not mistake that)."""
        trace.keep_out(partial(redact, secrets=self.secrets))
        try:
            ran = _run_agent(self, trace)
        finally:
            self.heartbeat.stop()
        if isinstance(ran, LeadResult):
            return ran
        return _settle(self.lead.card, ran, tuple(self.lead.delegated))


def _run_agent(parts: _LeadRun, trace: RunTrace) -> AgentResult | LeadResult:
    """The lead agent's run (a LeadResult: it could not start); an interrupt leaves the card
    resumable."""
    lead, claim, config, secrets = parts.lead, parts.claim, parts.config, parts.secrets
    scope, kb = lead.card, lead.card.kb
    profile = config.profiles.get(LEAD_PROFILE, config.profile("default"))
    try:
        try:
            runtime = build_runtime(
                config, profile, spec=parts.model_spec, env=parts.env,
                interrupt=parts.interrupt, max_turns=profile.max_turns, spent_cost=0.0,
                workspace=_workspace(config, claim),
                hook_context={"card_id": claim.card_id, "board": claim.board,
                              "run_id": claim.run_id, "lead": True})
        except (FatalModelError, ConfigError) as exc:
            message = redact(exc.message, secrets)
            _finish(scope, None, error=message)
            return LeadResult(claim.card_id, None, "error", message, ())
        result = runtime.run(system=LEAD_SYSTEM, prompt=lead_prompt(kb.card(claim.card_id)),
                             toolbox=RedactingToolbox(Toolbox([delegate.tool_for(config)],
                                                              lead), secrets),
                             hooks=LeadHooks(scope, parts.activity, secrets=secrets,
                                             caps=transcript_caps(profile)), trace=trace)
        if result.error:  # providers may echo a key back in an error message
            result = replace(result, error=redact(result.error, secrets))
    except BaseException:
        with critical(), suppress(KanbanError):  # leave the board consistent, whatever
            leave_resumable(lead)                # stopped us
        raise
    return result


def _workspace(config: Config, claim: claims.Claim) -> Path | None:
    """Where the lead's oversized tool results are saved (beside its workers' folders)."""
    if config.path is None:
        return None
    return config.path.parent / "workspaces" / claim.board / str(claim.card_id)


def release_lead(kb: Kanban, claim: claims.Claim) -> None:
    """Hand the lead's card back (no attempt spent) if this claim still holds it: the net
    under an interrupt that came before the lead's run could leave it resumable itself."""
    with kb.db.write() as conn:
        if claims.is_current(conn, claim.card_id, claim.claim_token):
            transitions.hand_back(conn, claim.card_id, "kanban run was interrupted",
                                  now=kb.clock(), actor=transitions.Actor(
                                      f"card:#{claim.card_id}", claim.claim_token))


def leave_resumable(lead: LeadScope) -> None:
    """The lead was stopped (Ctrl-C): a delegation under way becomes a wait on its children,
    else the card goes back to ready. Its conversation is stored, so `kanban run --resume`
    or any dispatcher continues it."""
    scope = lead.card
    with scope.fenced() as conn:
        if lead.pending:
            transitions.wait(conn, scope.card_id, Delegation(tuple(lead.pending)),
                             now=scope.kb.clock(), actor=scope.actor)
        else:
            transitions.hand_back(conn, scope.card_id, "kanban run was interrupted",
                                  now=scope.kb.clock(), actor=scope.actor)


def lead_prompt(card: CardRecord) -> str:
    return f"Goal: {card.goal}" + (f"\n\nContext: {card.context}" if card.context else "")


def _settle(scope: WorkerScope, result: AgentResult, delegated: tuple[int, ...]) -> LeadResult:
    answer = clean_text(result.text or "", MAX_SUMMARY).strip() or None
    # Out of turns, tokens or money is not done: the answer is only the model's last words.
    ok = result.stop_reason == StopReason.COMPLETED
    error = None if ok and answer else (result.error or _stopped(result.stop_reason, answer))
    _finish(scope, answer if not error else None, error=error)
    return LeadResult(scope.card_id, answer, str(result.stop_reason), error, delegated,
                      usage=result.usage.to_dict(), cost=result.cost)


def _stopped(reason: StopReason, answer: str | None) -> str:
    said = f"; its last words: {answer[:2000]}" if answer else ""
    return f"the lead stopped: {str(reason).replace('_', ' ')} reached{said}"


def _finish(scope: WorkerScope, answer: str | None, *, error: str | None) -> None:
    with scope.fenced() as conn:
        if error is None and answer is not None:
            transitions.complete(conn, scope.card_id, answer, now=scope.kb.clock(),
                                 actor=scope.actor)
        else:
            transitions.fail(conn, scope.card_id, error or "no answer", now=scope.kb.clock(),
                             actor=scope.actor)


def follow(kb: Kanban, card_id: int, *,
           on_progress: Callable[[list[ChildStatus]], None] | None = None,
           still_served: Callable[[], str | None] | None = None,
           poll_s: float = 1.0) -> LeadResult:
    """Watch a card (woken by the board's changes, as a dispatcher is) until it is done,
    failed or cancelled; its children's statuses go to `on_progress`. `still_served` says
    why waiting is pointless (no dispatcher left), or None."""
    from kanban.children import children_status
    from kanban.states import TERMINAL

    watcher, woken = change_watcher(kb.db), threading.Event()
    try:
        while True:
            with kb.db.read() as conn:
                card = cards.get_card(conn, card_id)
                kids = conn.column("SELECT id FROM card WHERE parent_id = :id ORDER BY id",
                                   {"id": card_id})
                statuses = children_status(conn, kids)
            if on_progress is not None:
                on_progress(statuses)
            if card.status in TERMINAL:
                answer = card.result if card.status == "done" else None
                error = None if answer else (card.error or f"the lead is {card.status}")
                return LeadResult(card.id, answer, card.status, error, tuple(kids),
                                  usage={"input_tokens": card.input_tokens,
                                         "output_tokens": card.output_tokens},
                                  cost=card.cost)
            reason = still_served() if still_served is not None else None
            if reason is not None:
                raise KanbanError(f"#{card_id} is {card.status} and {reason}")
            watcher.wait(poll_s, woken)
    finally:
        watcher.close()
