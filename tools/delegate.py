"""The `delegate` toolset: a lead agent hands tasks to the board and waits for results."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kanban import children, control
from kanban import toolsets as names
from kanban.agent.types import ToolResult
from kanban.children import ChildStatus, ChildTask, Delegation
from kanban.errors import LimitExceeded, ValidationError
from kanban.skills import SkillCatalog
from kanban.state.config import Config, Profile
from kanban.tools.registry import Tool, ToolRegistry
from kanban.tools.scope import WorkerScope
from kanban.transitions import Actor, cancel
from kanban.validation import DEPENDENCY_POLICIES
from kanban.workspaces import normalise_spec

TOOLSET = "delegate"
LEAD_PROFILE = "lead"  # the lead's own profile: its toolsets bound what children may get


@dataclass
class LeadScope:
    """The lead's card (for fencing) plus what its delegations may do."""

    card: WorkerScope
    config: Config
    model: str | None  # the children's model unless their profile names one
    on_progress: Callable[[list[ChildStatus]], None] = field(default=lambda statuses: None)
    poll_s: float = 1.0  # the longest sleep between looks at the children
    # Sleeps until the board changes or `poll_s` passes (the lead passes a change watcher)
    wait_change: Callable[[float], object] = field(default=time.sleep)
    delegated: list[int] = field(default_factory=list)
    home: Path = field(default_factory=Path.cwd)  # relative dir: workspaces start here
    skills: SkillCatalog = field(default_factory=SkillCatalog)  # what children may be given
    # A worker's orchestrator does not wait in its process: delegate ends the run and the
    # card waits (kanban.transitions.wait) with this delegation, resumed when it is settled.
    waits: bool = False
    pending: list[int] = field(default_factory=list)  # a batch being waited for in-process
    # Called when no live dispatcher serves the board: True if it started one (`kanban run`)
    keep_served: Callable[[], bool] = field(default=lambda: False)
    own_toolsets: tuple[str, ...] | None = None  # None: the lead profile's
    delegation: Delegation | None = None

    @property
    def toolsets(self) -> tuple[str, ...]:
        if self.own_toolsets is not None:
            return self.own_toolsets
        return self.config.profile(LEAD_PROFILE).toolsets


def grant(requested: Sequence[str] | None, profile: Profile, parent: Sequence[str],
          config: Config) -> tuple[tuple[str, ...], dict[str, str]]:
    """A child's toolsets: requested (else its profile's) ∩ the parent's ∩ known, minus the
    never-granted ones; and each dropped toolset with the reason. Unknown names raise."""
    wanted = list(requested) if requested is not None else list(profile.toolsets)
    unknown = names.unknown_in([w for w in wanted if w != names.LEAD_ONLY], config)
    if unknown:
        raise ValidationError(f"unknown toolset(s) {', '.join(map(repr, unknown))} (known: "
                              f"{', '.join(names.known(config))})")
    never = {names.LEAD_ONLY, *config.limits.never_granted}
    granted, dropped = [names.ALWAYS], {}
    for name in dict.fromkeys(wanted):
        if name == names.ALWAYS:
            continue
        if name in never:
            dropped[name] = "never granted to delegated cards"
        elif name not in parent:
            dropped[name] = "the lead does not have it (its profile's toolsets)"
        else:
            granted.append(name)
    return tuple(granted), dropped


def _tasks(args: dict[str, Any], scope: LeadScope) -> tuple[list[ChildTask], list[dict[str, str]]]:
    """The batch as cards-to-be, and per task the toolsets that were not granted."""
    config, limits = scope.config, scope.config.limits
    tasks, dropped = [], []
    for index, item in enumerate(args["tasks"]):
        profile = config.profile(item.get("profile", "default"))
        try:
            toolsets, lost = grant(item.get("toolsets"), profile, scope.toolsets, config)
            asked = item.get("workspace")
            workspace = normalise_spec(asked if asked is not None else profile.workspace,
                                       base=scope.home, has_parent=True)
            if asked is not None:
                _within(workspace, scope.home)
            review = _review_gate(item.get("review"), profile.review, config)
        except ValidationError as exc:
            raise ValidationError(f"task {index} ('{item['title']}'): {exc.message}") from None
        tasks.append(ChildTask(
            title=item["title"], goal=item.get("goal", ""), context=item.get("context", ""),
            profile=profile.name, toolsets=toolsets, after=tuple(item.get("after", ())),
            key=item.get("key"), skills=tuple(item.get("skills", ())),
            model=profile.model or scope.model, workspace=workspace,
            timeout_s=min(limits.child_timeout_s, profile.timeout_s),
            max_attempts=min(limits.child_max_attempts, profile.max_attempts),
            role=item.get("role", profile.role), review=review,
            on_dependency_failure=item.get("on_dependency_failure"),
        ))
        dropped.append(lost)
    return tasks, dropped


def _within(workspace: str | None, home: Path) -> None:
    """A `dir:` the model names must lie in the project the lead works on (where relative
    ones start): a delegated card is no way to reach the user's HOME, ~/.ssh or /etc. A
    profile's own `dir:` is a person's choice and is not checked here."""
    if workspace is None or not workspace.startswith("dir:"):
        return
    path, top = Path(workspace.removeprefix("dir:")), home.resolve()
    if path != top and top not in path.parents:
        raise ValidationError(f"workspace {workspace} lies outside {top}; a delegated card "
                              "may work only in a folder of the project (or scratch, parent, "
                              "worktree)")


def _review_gate(asked: str | None, default: str | None, config: Config) -> str | None:
    """A task's review gate: `reviewer:PROFILE` or `human` as the model asks, else its
    profile's own gate. A model may not write a verify command: that command would run
    outside the approvals that guard its own commands (a profile's verify gate, written by a
    person, still applies)."""
    if asked is None:
        return default
    if asked == "human":
        return asked
    kind, _, name = asked.partition(":")
    if kind != "reviewer" or name not in config.profiles:
        raise ValidationError(f"review {asked!r}: give reviewer:PROFILE (one of "
                              f"{', '.join(sorted(config.profiles))}) or human")
    return asked


def _refusal(scope: LeadScope, tasks: list[ChildTask]) -> str | None:
    limits = scope.config.limits
    kb = scope.card.kb
    with kb.db.read() as conn:
        paused = control.pause_state(conn, scope.card.board).paused
        running = children.unfinished_children(conn, scope.card.card_id)
        made = children.child_count(conn, scope.card.card_id)
        spent = children.tree_budget_spent(conn, scope.card.card_id, scope.config)
    if paused:
        return "spawning is paused; no cards were created (ask a person to run `kanban resume`)"
    if spent:
        return f"{spent}; no cards were created: finish with what you have"
    if not tasks:
        return "no tasks given"
    if len(tasks) > limits.max_children_per_call:
        return (f"too many tasks in one call: {len(tasks)} (the limit is "
                f"{limits.max_children_per_call}); split the work or merge tasks")
    if made + len(tasks) > limits.max_children_per_card:
        return (f"#{scope.card.card_id} has delegated {made} cards; {len(tasks)} more would "
                f"exceed the limit of {limits.max_children_per_card} per card")
    if len(running) + len(tasks) > limits.max_concurrent_children:
        return (f"{len(running)} children are still unfinished; {len(tasks)} more would exceed "
                f"the limit of {limits.max_concurrent_children} at once")
    missing = sorted({s for t in tasks for s in t.skills} - set(scope.skills.skills))
    if missing:
        known = ", ".join(sorted(scope.skills.skills)) or "none"
        return f"unknown skill(s): {', '.join(missing)} (known: {known})"
    return None


def delegate(args: dict[str, Any], scope: LeadScope) -> ToolResult:
    if scope.delegation is not None:
        return ToolResult(f"you already delegated to {_cards(scope.delegation.children)} in "
                          "this turn; their results come when they finish", is_error=True)
    unknown = sorted({t.get("profile", "default") for t in args["tasks"]}
                     - set(routable(scope.config)))
    if unknown:
        return ToolResult(f"unknown profile(s): {', '.join(unknown)} (known: "
                          f"{', '.join(routable(scope.config))})", is_error=True)
    tasks, dropped = _tasks(args, scope)
    refusal = _refusal(scope, tasks)
    if refusal:
        return ToolResult(refusal, is_error=True)
    limits = scope.config.limits
    try:
        with scope.card.fenced() as conn:
            ids = children.add_children(
                conn, scope.card.card_id, tasks, model=scope.model,
                timeout_s=limits.child_timeout_s, max_attempts=limits.child_max_attempts,
                max_depth=limits.max_depth, now=scope.card.kb.clock(),
                max_children=limits.max_children_per_card)  # checked again, in the write
    except LimitExceeded as exc:
        return ToolResult(exc.message, is_error=True)
    scope.delegated.extend(ids)
    if scope.waits:  # the run ends here; the card waits and resumes with report()
        scope.delegation = Delegation(tuple(ids), not_granted=tuple(dropped))
        return ToolResult(f"delegated to {_cards(ids)}; this run ends now and resumes with "
                          "their results when they finish", ends_run=True)
    scope.pending = ids
    statuses = wait_for(scope, ids, deadline=time.monotonic() + _patience(scope, len(ids)))
    scope.pending = []
    return ToolResult(report(statuses, dropped))


def report(statuses: Sequence[ChildStatus], dropped: Sequence[dict[str, str]]) -> str:
    """The delegate call's result: each child's status and summary, and what was not granted."""
    items = []
    for index, status in enumerate(statuses):
        item = status.to_json()
        lost = dropped[index] if index < len(dropped) else None
        if lost:
            item["toolsets_not_granted"] = lost
        items.append(item)
    return json.dumps({"children": items}, ensure_ascii=False)


def _cards(ids: Sequence[int]) -> str:
    return ", ".join(f"#{i}" for i in ids)


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
        elif not serving and not scope.keep_served():
            reason = f"no live dispatcher serves board {scope.card.board!r}"
        if reason is not None:
            cancel_children(scope, [s.id for s in statuses if not s.settled], reason=reason)
            with kb.db.read() as conn:
                return children.children_status(conn, ids)
        scope.wait_change(scope.poll_s)


def cancel_children(scope: LeadScope, ids: list[int], *, reason: str) -> None:
    kb = scope.card.kb
    actor = Actor(f"card:#{scope.card.card_id}")
    with kb.db.write() as conn:
        for status in children.children_status(conn, ids):
            if not status.settled:
                cancel(conn, status.id, now=kb.clock(), actor=actor, reason=reason)


def routable(config: Config) -> list[str]:
    """Profiles a lead may hand work to (its own is not one)."""
    return sorted(name for name in config.profiles if name != LEAD_PROFILE)


def tool_for(config: Config, depth: int = 0) -> Tool:
    """The delegate tool with `config`'s profiles, their descriptions and the toolsets, for
    a card at `depth` (a lead: 0)."""
    profiles = routable(config)
    listed = "; ".join(f"{name}: {config.profiles[name].description or 'no description'} "
                       f"(toolsets {', '.join(config.profiles[name].toolsets)})"
                       for name in profiles)
    task = _task_schema(config, profiles, depth)
    schema = {"type": "object", "properties": {"tasks": {"type": "array", "items": task,
                                                         "minItems": 1}},
              "required": ["tasks"], "additionalProperties": False}
    description = (
        "Delegate tasks to workers as cards on the board and wait for them. Each task has "
        "a title, a goal and optional context; `after` lists indexes of earlier tasks in "
        "the same call that must finish first; `key` reuses an unfinished card added with the "
        "same key instead of adding another; `skills` names skills the worker gets. Returns "
        "each child's status and summary, and any requested toolsets that were not granted. "
        f"Profiles: {listed}.")
    return Tool("delegate", description, schema, delegate, TOOLSET, takes_context=True,
                parallel=False)


def _task_schema(config: Config, profiles: list[str], depth: int) -> dict[str, Any]:
    """The JSON schema of one delegated task. `role: orchestrator` is offered only where
    it can work: when the child's own children (depth + 2) are within max_depth."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "goal": {"type": "string"},
            "context": {"type": "string"},
            "profile": {"type": "string", "enum": profiles,
                        "description": "who does the task (default: default)"},
            "toolsets": {"type": "array", "items": {"type": "string"},
                         "description": "default: the profile's; known: "
                                        + ", ".join(names.known(config))},
            "workspace": {"type": "string", "description": (
                "scratch (default: a folder of its own), parent (share your folder with "
                "the other `parent` tasks), worktree (a git branch kanban/<card>) or "
                "dir:PATH (an existing folder)")},
            "after": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "on_dependency_failure": {"type": "string", "enum": list(DEPENDENCY_POLICIES),
                                      "description": (
                "if an `after` task fails or is cancelled: block (default: this task waits, "
                "blocked, for a person to retry it) or cancel (this task is cancelled too)")},
            "key": {"type": "string", "minLength": 1, "maxLength": 200},
            "skills": {"type": "array", "items": {"type": "string"}},
            "review": {"type": "string", "description": (
                "a review gate before the task counts as done: reviewer:PROFILE (that "
                "profile's agent approves or asks for changes) or human (a person decides); "
                "default: the profile's own gate")},
            "role": {"type": "string", "enum": ["leaf", "orchestrator"], "description": (
                "orchestrator: the child may delegate in turn, within max_depth "
                f"({config.limits.max_depth}); default: leaf")},
        },
        "required": ["title", "goal"],
        "additionalProperties": False,
    }
    if depth + 2 > config.limits.max_depth:
        del schema["properties"]["role"]
    return schema


def register(registry: ToolRegistry) -> None:
    registry.register(tool_for(Config()))
