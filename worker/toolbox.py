"""A worker's tools: which toolsets its card gets, bound to its workspace and profile."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from kanban import toolsets as names
from kanban.agent.types import Toolbox as AgentToolbox
from kanban.agent.types import ToolCall, ToolResult, ToolSpec
from kanban.records import CardRecord
from kanban.state.config import Config, Profile
from kanban.state.network import Network
from kanban.state.sandbox_paths import card_home_path
from kanban.tools import delegate
from kanban.tools.catalog import REGISTRY
from kanban.tools.delegate import LeadScope
from kanban.tools.registry import Tool, Toolbox
from kanban.tools.runner import Runner
from kanban.tools.scope import WorkerScope
from kanban.tools.skill_tools import TOOLSET as SKILLS
from kanban.tools.skill_tools import WRITE_TOOLS
from kanban.tools.workbench import Workbench, command_env
from kanban.worker.redact import redact
from kanban.worker.sandboxing import hidden_folders
from kanban.workspaces import Workspace

DEADLINE_MARGIN_S = 3.0  # commands end before the dispatcher's own timeout strikes


def card_toolsets(card: CardRecord, profile: Profile, config: Config) -> list[str]:
    """The card's own toolsets (a delegated card's were granted when it was made), else its
    profile's; always `kanban`. Unknown names raise ConfigError."""
    chosen = card.toolsets.split(",") if card.toolsets else list(profile.toolsets)
    chosen = [names.ALWAYS, *(t for t in chosen if t and t != names.ALWAYS)]
    names.check(chosen, config, f"card #{card.id}")
    return list(dict.fromkeys(chosen))


def approval_mode(card: CardRecord, profile: Profile, *, sandboxed: bool = True) -> str:
    """The profile's setting; unset, delegated cards refuse unknown and dangerous commands
    and others ask. Without a sandbox, `allow` asks too, unless the profile itself turned the
    sandbox off (`sandbox = "off"` with `approval = "allow"`: its author said "I know")."""
    mode = profile.approval
    if mode is None:
        return "deny" if card.parent_id is not None else "ask"
    if mode == "allow" and not sandboxed and profile.sandbox != "off":
        return "ask"
    return mode


def workbench(card: CardRecord, profile: Profile, config: Config, *, scope: WorkerScope,
              workspace: Workspace, env: Mapping[str, str], runner: Runner,
              home: Path, started: float | None = None,
              network: Network | None = None, readonly: tuple[Path, ...] = ()) -> Workbench:
    timeout = card.timeout_s or profile.timeout_s
    search_var = config.web.search_key_env
    return Workbench(
        workspace=workspace.path, profile=profile,
        approval=approval_mode(card, profile, sandboxed=runner.name == "bwrap"),
        env=command_env(env, workspace.path, drop=(search_var,) if search_var else ()),
        runner=runner, web=config.web, scope=scope, network=network,
        deadline=(started if started is not None else time.monotonic()) + timeout
        - DEADLINE_MARGIN_S,
        search_key=env.get(search_var) if search_var else None,
        hidden=hidden_folders(home, workspace.path), readonly=readonly,
        own_home=card_home_path(home, card.board, card.id) if runner.name == "bwrap" else None)


def toolbox(toolsets: list[str], config: Config, scope: WorkerScope,
            bench: Workbench, *, orchestrator: LeadScope | None = None,
            depth: int = 0) -> Toolbox:
    """Registry tools of the built-in and plug-in toolsets, plus the tools of MCP servers
    (started here, so the model sees their tools), plus `delegate` for an orchestrator.
    McpError if a server does not start."""
    registered: list[str] = []
    extra: list[Tool] = []
    contexts: dict[str, object] = {}
    if orchestrator is not None:
        extra.append(delegate.tool_for(config, depth))
        contexts[delegate.TOOLSET] = orchestrator
    servers = [t.removeprefix("mcp:") for t in toolsets if t.startswith("mcp:")]
    if servers:
        from kanban.tools.mcp import McpServers

        bench.mcp = McpServers({n: config.mcp[n] for n in servers}, cwd=bench.workspace,
                               env=bench.env, wrap=bench.runner.wrap)
        for name in servers:
            extra += bench.mcp.tools(name)
    for name in toolsets:
        if name.startswith("mcp:"):
            continue
        if name not in names.BUILTIN and name not in names.BY_ROLE:
            names.load_plugin(name, REGISTRY)
        registered.append(name)
    # The board's toolsets (kanban, skills) act for the card; the others work in its workspace.
    # Role toolsets (review, orchestrator, triage) act for the card too.
    contexts.update({name: bench for name in registered
                     if name not in (names.ALWAYS, SKILLS, *names.BY_ROLE)})
    if names.TRIAGE in registered:  # a decomposer's proposal becomes cards on the board
        from kanban.tools.triage_tools import BoardDecomposer

        contexts[names.TRIAGE] = BoardDecomposer(scope, tuple(config.profiles),
                                                 max_cards=config.limits.max_children_per_card)
    exclude = () if scope.skill_writer is not None else WRITE_TOOLS
    return REGISTRY.toolbox(registered, scope, contexts=contexts, extra=extra, exclude=exclude)



class RedactingToolbox:
    """A toolbox whose calls reach their tools with the worker's credentials masked (what a
    tool stores, a comment or a result, never holds a key the model echoed) and whose
    results come back masked too."""

    def __init__(self, inner: AgentToolbox, secrets: Sequence[str]) -> None:
        self.inner = inner
        self.secrets = tuple(secrets)

    def specs(self) -> Sequence[ToolSpec]:
        return self.inner.specs()

    def call(self, tool_call: ToolCall) -> ToolResult:
        masked = redact(tool_call.arguments, self.secrets)
        if masked != tool_call.arguments:
            tool_call = replace(tool_call, arguments=masked)
        result = self.inner.call(tool_call)
        if isinstance(result, str):
            result = ToolResult(result)
        content = redact(result.content, self.secrets)
        return result if content == result.content else replace(result, content=content)
