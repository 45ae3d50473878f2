"""An agent card's run in its worker: workspace, plan, runtime, tools, then the agent, and
how it ended (worker.outcome)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from kanban import skill_usage
from kanban.agent.errors import FatalModelError
from kanban.agent.interrupt import Interrupt
from kanban.agent.scripted import resume_scripts
from kanban.agent.tracing import NO_TRACE, RunTrace
from kanban.agent.types import Message
from kanban.agent_skills import Author, SkillWriter
from kanban.attachments import Attachments
from kanban.children import tree_budget_spent
from kanban.errors import KanbanError, ValidationError
from kanban.events import record_event
from kanban.readmodels import CONTINUED
from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.state.config import Config
from kanban.state.errors import ConfigError
from kanban.state.network import Network
from kanban.state.store import Conn
from kanban.tools.delegate import LeadScope
from kanban.tools.netbridge import ProxiedRunner
from kanban.tools.registry import Toolbox
from kanban.tools.runner import Runner
from kanban.tools.sandbox_runner import BwrapRunner, bwrap_runner, offline
from kanban.tools.scope import WorkerScope
from kanban.tools.workbench import Workbench
from kanban.worker import gates
from kanban.worker import toolbox as tools
from kanban.worker.activity import Activity
from kanban.worker.env import WorkerEnv
from kanban.worker.heartbeat import HeartbeatThread
from kanban.worker.orchestrator import opening, orchestrator_scope, wait
from kanban.worker.outcome import EXIT_OK, fail, requeue, retrying, settle
from kanban.worker.plan import WorkerPlan, prepare_run, writes_skills
from kanban.worker.redact import redact, secrets_in
from kanban.worker.resume import resumed_run, stored_conversation
from kanban.worker.runtime import AgentRuntime, build_runtime, key_values
from kanban.worker.sandboxing import (
    RunnerChoice,
    card_home_dir,
    card_network,
    card_reaches_host,
    choose_runner,
    refuse_board_workspace,
)
from kanban.workspaces import DIR, WORKTREE, Workspace

COMMAND_TOOLSETS = ("terminal",)  # toolsets whose tools start commands


@dataclass(frozen=True)
class Setting:
    """Where and with what the card's tools work."""

    runner: Runner
    home: Path  # the board's folder: workspaces/, logs/, config.toml
    started: float  # time.monotonic() when the worker began: the card's time runs from it
    trace: RunTrace = NO_TRACE  # the run's span (kanban.worker.tracing)


def run_agent_card(scope: WorkerScope, card: CardRecord, wenv: WorkerEnv, config: Config,
                   env: Mapping[str, str], setting: Setting) -> int:
    """Watch thread, the run's parts, the agent, its outcome."""
    activity, interrupt = Activity(max_turns=0), Interrupt()
    heartbeat = HeartbeatThread(scope, activity=activity, interrupt=interrupt)
    heartbeat.start()
    parts: Parts | None = None
    try:
        ready = _set_up(scope, card, wenv, config, env, setting, activity, interrupt)
        if not isinstance(ready, Parts):
            heartbeat.stop()  # settling gives the lease up: the watch must not mistake that
            return ready()
        parts = ready
        setting.trace.keep_out(partial(redact, secrets=parts.secrets))  # spans too
        restored = retrying(scope, lambda: _stored(scope.kb, card, wenv.run_id))
        _say_start(card, parts, restored)
        if restored:
            _record_continued(scope, card, len(restored))
        if restored:  # an offline script goes on where the stored answers leave it
            resume_scripts(parts.runtime.model, sum(m.role == "assistant" for m in restored))
        start = opening(scope, card, parts.plan, parts.lead, restored, activity, parts.secrets)
        result = parts.runtime.run(
            system=start.system, prompt=start.prompt,
            toolbox=tools.RedactingToolbox(parts.toolbox, parts.secrets), hooks=start.hooks,
            trace=setting.trace)
    finally:
        heartbeat.stop()
        if parts is not None:
            parts.close()
    if result.error:  # providers may echo a key back in an error message
        result = replace(result, error=redact(result.error, parts.secrets))
    if parts.lead is not None and parts.lead.delegation is not None and not scope.finished:
        wait(scope, parts.lead.delegation, result)
        return EXIT_OK
    return settle(scope, result, parts.runtime.limits)


@dataclass(frozen=True)
class Parts:
    """What a card's agent runs with."""

    plan: WorkerPlan
    workspace: Workspace
    runtime: AgentRuntime
    bench: Workbench
    lead: LeadScope | None
    toolbox: Toolbox
    secrets: list[str]  # to redact, longest first

    def close(self) -> None:
        _close(self.bench)


def _set_up(scope: WorkerScope, card: CardRecord, wenv: WorkerEnv, config: Config,
            env: Mapping[str, str], setting: Setting, activity: Activity,
            interrupt: Interrupt) -> Parts | Callable[[], int]:
    """The run's parts; else what records why the card cannot run (call it once the
    heartbeat has stopped)."""
    secrets = secrets_in(env)
    try:
        profile = config.profile(card.profile)
        secrets = sorted({*secrets, *key_values(profile, env)}, key=len, reverse=True)
        # Reads of the board: tried again while the database is away
        workspace = wenv.workspace or _resolve(scope, card, config, setting.home)
        if workspace.kind == DIR:
            refuse_board_workspace(setting.home, workspace.path)
        plan = retrying(scope, lambda: _prepare(scope.kb, card, config, env,
                                                home=setting.home, workspace=workspace.path))
        secrets = sorted({*secrets, *key_values(plan.profile, env)}, key=len, reverse=True)
        scope.skills = {skill.name: skill for skill in plan.skills}
        scope.skill_files = plan.materials.skill_files
        activity.plan(plan.max_turns)
        _skill_scope(scope, plan, setting.home)
        runtime = build_runtime(
            config, plan.profile, spec=plan.model, env=env, interrupt=interrupt,
            max_turns=plan.max_turns, spent_cost=plan.limits.spent_cost,
            workspace=workspace.path, hook_context=_hook_context(card, wenv))
        network = retrying(scope, lambda: card_network(scope.kb, card, plan.profile, config))
        choice = _command_runner(scope, card, config, plan, setting, workspace, network)
    except (FatalModelError, ConfigError, ValidationError) as exc:
        # credentials, an unknown model, profile or toolset, a skill that no longer
        # exists, a workspace that cannot be resolved
        message = redact(exc.message, secrets)
        return lambda: fail(scope, message)
    bench = tools.workbench(card, plan.profile, config, scope=scope, workspace=workspace,
                            env=env, runner=choice.runner, started=setting.started,
                            home=setting.home, network=network, readonly=choice.readonly)
    if workspace.kind == WORKTREE:
        scope.on_complete = _worktree_note(workspace, card.id, card.title, choice.runner,
                                           setting.home)
    gates.arm(scope, card, bench)
    lead = orchestrator_scope(scope, card, plan, config, setting.home)
    try:
        toolbox = tools.toolbox(list(plan.toolsets), config, scope, bench, orchestrator=lead,
                                depth=card.depth)
    except ConfigError as exc:  # a plug-in that does not load
        _close(bench)
        message = redact(exc.message, secrets)
        return lambda: fail(scope, message)
    except KanbanError as exc:  # an MCP server that does not start: try again later
        _close(bench)
        message = redact(exc.message, secrets)
        return lambda: requeue(scope, message)
    parts = Parts(plan, workspace, runtime, bench, lead, toolbox, secrets)
    spent = retrying(scope, lambda: _tree_spent(scope.kb, card, config))
    if spent:  # a child may not start once its tree's budget is gone
        parts.close()
        return lambda: fail(scope, f"not started: {spent}", code=EXIT_OK)
    return parts


def _close(bench: Workbench) -> None:
    """Stop the MCP servers the workbench started, the network proxy and the card's
    sandbox."""
    if bench.mcp is not None:
        bench.mcp.close()
    if isinstance(bench.runner, (ProxiedRunner, BwrapRunner)):
        bench.runner.close()


def _say_start(card: CardRecord, parts: Parts, restored: list[Message] | None) -> None:
    print(f"card #{card.id} attempt {card.attempt}: model {parts.runtime.model.name}, "
          f"toolsets {','.join(parts.plan.toolsets)}{', delegate' if parts.lead else ''}, "
          f"workspace {parts.workspace.path}"
          + (f"; resuming {len(restored)} stored messages" if restored else ""), flush=True)


def _command_runner(scope: WorkerScope, card: CardRecord, config: Config, plan: WorkerPlan,
                    setting: Setting, workspace: Workspace, network: Network) -> RunnerChoice:
    """The sandbox (or the plain runner) for the card's commands and MCP servers, with what
    the file tools must leave alone, said in the worker's log and, for cards that run
    commands, in the run's events."""
    servers = [config.mcp[t[4:]] for t in plan.toolsets
               if t.startswith("mcp:") and t[4:] in config.mcp]
    own_home = card_home_dir(setting.home, card.board, card.id) \
        if plan.profile.sandbox != "off" else None
    reach_host = network is True and retrying(
        scope, lambda: card_reaches_host(scope.kb, card, plan.profile, config))
    choice = choose_runner(setting.runner, plan.profile, network=network,
                           workspace=workspace.path, home=setting.home, checkout=workspace,
                           web=config.web, card_home=own_home, servers=servers,
                           reach_host=reach_host)
    print(f"card #{card.id}: {choice.note}", flush=True)
    if any(t in COMMAND_TOOLSETS or t.startswith("mcp:") for t in plan.toolsets):
        scope.write(lambda conn: record_event(
            conn, board=scope.board, card_id=scope.card_id, run_id=scope.run_id,
            kind="sandbox", actor=scope.actor.name, at=scope.kb.clock(),
            runner=choice.runner.name, note=choice.note))
    return choice


def _resolve(scope: WorkerScope, card: CardRecord, config: Config, home: Path) -> Workspace:
    """The card's workspace read from the board (no dispatcher handed it over); a worktree
    with the git folders its dispatcher recorded, else ValidationError."""
    from kanban.tools import worktree

    workspace = retrying(scope, lambda: scope.kb.workspace(card.id, home, config.workspaces()))
    if workspace.kind != WORKTREE:
        return workspace
    try:
        return worktree.recorded(workspace, home)
    except KanbanError as exc:
        raise ValidationError(f"workspace: {exc.message}") from None


def _tree_spent(kb: Kanban, card: CardRecord, config: Config) -> str | None:
    if card.parent_id is None:
        return None  # a root's own budget is its profile's (token_budget, max_cost)
    with kb.db.read() as conn:
        return tree_budget_spent(conn, card.id, config)


def _stored(kb: Kanban, card: CardRecord, run_id: int) -> list[Message] | None:
    with kb.db.read() as conn:
        return stored_conversation(conn, card, run_id)


def _record_continued(scope: WorkerScope, card: CardRecord, messages: int) -> None:
    """Which run this one continues, and how many messages it copied from it: `kanban log`
    then shows them once, under the run that wrote them."""

    def record(conn: Conn) -> None:
        source = resumed_run(conn, card, scope.run_id)
        if source is not None:
            record_event(conn, board=scope.board, card_id=scope.card_id, run_id=scope.run_id,
                         kind=CONTINUED, actor=scope.actor.name, at=scope.kb.clock(),
                         from_run=source, messages=messages)

    scope.write(record)


def _skill_scope(scope: WorkerScope, plan: WorkerPlan, home: Path) -> None:
    """Whether the card may write skills, and the skills it was given recorded as used (the
    curator keeps used skills)."""
    scope.profile = plan.card.profile
    if writes_skills(plan.card, plan.profile):
        scope.skill_writer = SkillWriter(home, Author(plan.card.id, plan.card.profile,
                                                      plan.model))
    if plan.skills:
        names = [skill.name for skill in plan.skills]
        scope.write(lambda conn: skill_usage.record(
            conn, names, "given", now=scope.kb.clock(), card_id=plan.card.id,
            profile=plan.card.profile), fenced=False)


def _prepare(kb: Kanban, card: CardRecord, config: Config, env: Mapping[str, str], *,
             home: Path, workspace: Path) -> WorkerPlan:
    """The plan, with attachments and skill files copied into the workspace."""
    attachments = Attachments(kb.db, home, clock=kb.clock)
    return prepare_run(attachments, card, config, env, home=home, workspace=workspace)


def _worktree_note(workspace: Workspace, card_id: int, title: str, runner: Runner,
                   home: Path) -> Callable[[str], str]:
    """Commit the worktree when the card completes (inside the card's sandbox, behind the
    same wall as its commands), note the branch's tip in the board's record, and add the
    branch to the summary."""

    def note(summary: str) -> str:
        from kanban.tools import worktree, worktree_refs

        sandboxed = bwrap_runner(runner)
        mirror = None  # where the card's sandbox keeps its branch's ref (BranchMirror)
        if sandboxed is not None and sandboxed.policy.moved and workspace.git is not None \
                and workspace.branch is not None:
            mirror = worktree_refs.branch_mirror(home, workspace.git, workspace.branch)
        try:
            described = worktree.finish(workspace, f"kanban #{card_id}: {title}",
                                        wrap=offline(runner), mirror=mirror)
            worktree.remember_tip(workspace, home)
        except KanbanError as exc:
            described = f"Workspace: git worktree {workspace.path}; could not commit: {exc}"
        return f"{summary}\n\n{described[:5000]}"

    return note


def _hook_context(card: CardRecord, wenv: WorkerEnv) -> dict[str, object]:
    """What user hooks are told about the run."""
    return {"card_id": card.id, "board": card.board, "run_id": wenv.run_id,
            "attempt": card.attempt, "profile": card.profile, "title": card.title}


