"""A worker whose card may delegate: its `delegate` tool, its opening, and the wait.

An orchestrator never waits in its process: `delegate` ends the run, the card goes
`waiting` (kanban.transitions.wait) and a later claim resumes the stored conversation with
the children's report (kanban.worker.resume). A lead card (`kanban run`) is an
orchestrator whose final text is its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kanban import transitions
from kanban.agent.loop import AgentResult
from kanban.agent.types import Message
from kanban.children import Delegation
from kanban.records import CardRecord
from kanban.state.config import Config
from kanban.tools.delegate import LeadScope
from kanban.tools.scope import WorkerScope
from kanban.worker.activity import Activity
from kanban.worker.hooks import WorkerHooks
from kanban.worker.lead import LEAD_SYSTEM, LeadHooks, children_model, lead_prompt
from kanban.worker.plan import WorkerPlan
from kanban.worker.transcript import transcript_caps

ORCHESTRATOR_PROMPT = """

You may hand parts of your card to other workers with the `delegate` tool. Your run then
ends and resumes, with this conversation, once they have all finished: the delegate call's
result lists each child's status and summary. Then finish your card as usual."""


def is_lead(card: CardRecord) -> bool:
    return card.created_by == "lead"


def orchestrator_scope(scope: WorkerScope, card: CardRecord, plan: WorkerPlan,
                       config: Config, home: Path) -> LeadScope | None:
    """An orchestrator card (by its own role or its profile's) above max_depth gets
    `delegate`; a leaf never does. `home` is the board's folder."""
    role = "orchestrator" if plan.profile.role == "orchestrator" else card.role
    if role != "orchestrator" or card.depth >= config.limits.max_depth:
        return None
    model = children_model(plan.model) if is_lead(card) else plan.model
    return LeadScope(scope, config, model, home=home.parent, waits=True,
                     own_toolsets=plan.toolsets)


@dataclass(frozen=True)
class Opening:
    system: str
    prompt: list[Message]
    hooks: WorkerHooks


def opening(scope: WorkerScope, card: CardRecord, plan: WorkerPlan, lead: LeadScope | None,
            restored: Sequence[Message] | None, activity: Activity,
            secrets: Sequence[str]) -> Opening:
    """What the agent starts from: the stored conversation if there is one, else the plan's
    (a lead's own prompt for a lead card; the delegation note for an orchestrator)."""
    hooks = (LeadHooks if is_lead(card) else WorkerHooks)(
        scope, activity, secrets=secrets, caps=transcript_caps(plan.profile))
    if restored:
        return Opening("", with_notes(restored, plan.resume_notes), hooks)
    if is_lead(card):
        return Opening(LEAD_SYSTEM, [Message("user", lead_prompt(card))], hooks)
    system = plan.system + (ORCHESTRATOR_PROMPT if lead is not None else "")
    return Opening(system, list(plan.opening), hooks)


def with_notes(restored: Sequence[Message], notes: Sequence[str]) -> list[Message]:
    """The stored conversation, then what happened since it stopped (a person's decisions
    on its commands), in the user turn the model answers next."""
    messages = list(restored)
    if not notes:
        return messages
    text = "\n\n".join(notes)
    last = messages[-1] if messages else None
    if last is not None and last.role == "user" and isinstance(last.content, str):
        messages[-1] = replace(last, content=f"{last.content}\n\n{text}")
    else:
        messages.append(Message("user", text))
    return messages


def wait(scope: WorkerScope, delegation: Delegation, result: AgentResult) -> None:
    """The run delegated: the card waits on its children (the worker then exits)."""
    print(f"agent delegated to {', '.join(f'#{i}' for i in delegation.children)} after "
          f"{result.turns} turns ({result.spent()}); the card waits", flush=True)
    call = next((c.id for m in reversed(result.messages) for c in m.tool_calls
                 if c.name == "delegate"), None)
    waiting = replace(delegation, call_id=call)
    scope.write(lambda conn: transitions.wait(conn, scope.card_id, waiting,
                                              now=scope.kb.clock(), actor=scope.actor))
