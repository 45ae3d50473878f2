"""The `delegate` toolset: a lead agent hands tasks to the board and waits for results."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.types import ToolResult
from kanban import children, control
from kanban.children import ChildStatus, ChildTask
from kanban.transitions import Actor, cancel
from state.config import Config
from tools.registry import ToolRegistry
from tools.scope import WorkerScope

TOOLSET = "delegate"
GRANTABLE = frozenset({"kanban"})  # what a lead may hand its children; never `delegate`


@dataclass
class LeadScope:
    """The lead's card (for fencing) plus what its delegations may do."""

    card: WorkerScope
    config: Config
    model: str | None  # the children's model unless their profile names one
    on_progress: Callable[[list[ChildStatus]], None] = field(default=lambda statuses: None)
    poll_s: float = 0.1
    delegated: list[int] = field(default_factory=list)


def _tasks(args: dict[str, Any]) -> list[ChildTask]:
    raw = args["tasks"]
    tasks = []
    for item in raw:
        wanted = item.get("toolsets")
        tasks.append(ChildTask(
            title=item["title"], goal=item.get("goal", ""), context=item.get("context", ""),
            profile=item.get("profile", "default"),
            toolsets=tuple(t for t in wanted if t in GRANTABLE) if wanted is not None else None,
            after=tuple(item.get("after", ())),
        ))
    return tasks


def _refusal(scope: LeadScope, tasks: list[ChildTask]) -> str | None:
    limits = scope.config.limits
    kb = scope.card.kb
    with kb.db.read() as conn:
        paused = control.pause_state(conn, scope.card.board).paused
        running = children.unfinished_children(conn, scope.card.card_id)
    if paused:
        return "spawning is paused; no cards were created (ask a person to run `kanban resume`)"
    if not tasks:
        return "no tasks given"
    if len(tasks) > limits.max_children_per_call:
        return (f"too many tasks in one call: {len(tasks)} (the limit is "
                f"{limits.max_children_per_call}); split the work or merge tasks")
    if len(running) + len(tasks) > limits.max_concurrent_children:
        return (f"{len(running)} children are still unfinished; {len(tasks)} more would exceed "
                f"the limit of {limits.max_concurrent_children} at once")
    unknown = sorted({t.profile for t in tasks} - set(scope.config.profiles))
    if unknown:
        return f"unknown profile(s): {', '.join(unknown)}"
    return None


def delegate(args: dict[str, Any], scope: LeadScope) -> ToolResult:
    tasks = _tasks(args)
    refusal = _refusal(scope, tasks)
    if refusal:
        return ToolResult(refusal, is_error=True)
    limits = scope.config.limits
    with scope.card.fenced() as conn:
        ids = children.add_children(
            conn, scope.card.card_id, tasks, model=scope.model, timeout_s=limits.child_timeout_s,
            max_attempts=limits.child_max_attempts, max_depth=limits.max_depth,
            now=scope.card.kb.clock())
    scope.delegated.extend(ids)
    statuses = wait_for(scope, ids, deadline=time.monotonic() + _patience(scope, len(ids)))
    return ToolResult(json.dumps({"children": [s.to_json() for s in statuses]},
                                 ensure_ascii=False))


def _patience(scope: LeadScope, count: int) -> float:
    """How long to wait for a batch: every child in turn, each with all its attempts."""
    limits = scope.config.limits
    return limits.child_timeout_s * limits.child_max_attempts * count + 60


def wait_for(scope: LeadScope, ids: list[int], *, deadline: float) -> list[ChildStatus]:
    """Block until every child is done, failed, cancelled or blocked; give up at the
    deadline, or when no live dispatcher serves the board any more."""
    kb = scope.card.kb
    while True:
        with kb.db.read() as conn:
            statuses = children.children_status(conn, ids)
            serving = control.serving_dispatchers(conn, scope.card.board, kb.clock())
        scope.on_progress(statuses)
        if all(s.settled for s in statuses):
            return statuses
        reason = None
        if time.monotonic() > deadline:
            reason = "the lead stopped waiting (delegation timed out)"
        elif not serving:
            reason = f"no live dispatcher serves board {scope.card.board!r}"
        if reason is not None:
            cancel_children(scope, [s.id for s in statuses if not s.settled], reason=reason)
            with kb.db.read() as conn:
                return children.children_status(conn, ids)
        time.sleep(scope.poll_s)


def cancel_children(scope: LeadScope, ids: list[int], *, reason: str) -> None:
    kb = scope.card.kb
    actor = Actor(f"card:#{scope.card.card_id}")
    with kb.db.write() as conn:
        for status in children.children_status(conn, ids):
            if not status.settled:
                cancel(conn, status.id, now=kb.clock(), actor=actor, reason=reason)


def register(registry: ToolRegistry) -> None:
    task = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "goal": {"type": "string"},
            "context": {"type": "string"},
            "profile": {"type": "string"},
            "toolsets": {"type": "array", "items": {"type": "string"}},
            "after": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        },
        "required": ["title", "goal"],
        "additionalProperties": False,
    }
    schema = {"type": "object", "properties": {"tasks": {"type": "array", "items": task,
                                                         "minItems": 1}},
              "required": ["tasks"], "additionalProperties": False}
    registry.tool(
        "delegate", toolset=TOOLSET, parameters=schema, takes_context=True,
        description=(
            "Delegate tasks to workers as cards on the board and wait for them. Each task has "
            "a title, a goal and optional context; `after` lists indexes of earlier tasks in "
            "the same call that must finish first. Returns each child's status and summary."),
    )(delegate)
