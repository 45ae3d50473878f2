"""config.toml next to the database: limits and named agent profiles, as records (read from
the file by kanban.state.config_file)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kanban.state.errors import ConfigError

DEFAULT_OPENAI_MODEL = "openai:gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "anthropic:claude-sonnet-4-5"
SCRIPTED_DEMO = "scripted:demo"
CONFIG_ENV = "KANBAN_CONFIG"  # an explicit config file (must exist); also how workers get theirs


@dataclass(frozen=True)
class Profile:
    """How a card's agent runs: model, tools, limits."""

    name: str = "default"
    model: str | None = None  # None: chosen from the credentials present
    toolsets: tuple[str, ...] = ("kanban",)
    base_url: str | None = None
    timeout_s: float = 600.0
    max_turns: int = 20
    token_budget: int | None = 200_000
    max_concurrent: int | None = None
    max_attempts: int = 3
    # The agent runtime (issue 15): fallbacks, keys, API mode, reasoning, cost, context.
    fallback: tuple[str, ...] = ()  # model specs tried in order when the model fails
    api_key_env: tuple[str, ...] = ()  # variables holding API keys, rotated on 429
    api: str | None = None  # "chat" or "responses" for openai:MODEL
    reasoning: str | None = None  # "low", "medium" or "high": thinking effort
    max_cost: float | None = None  # dollars per card
    context_window: int | None = None  # tokens; default from the model's name
    compress_at: float = 0.5  # share of the window past which the middle is summarised
    tool_result_chars: int = 16_000  # longer tool results are cut and saved whole
    max_parallel_tools: int = 8  # tool calls of one turn running at once
    # Bounds on model output (issue 21): each is an error result the model can act on.
    max_tool_calls_per_turn: int = 64  # the rest of a turn's calls are not run
    max_argument_chars: int = 1_000_000  # one tool call's arguments
    max_message_chars: int = 64_000  # one stored transcript message (head and tail kept)
    max_transcript_chars: int = 4_000_000  # a card's transcript; older tool results are cut
    skills: tuple[str, ...] = ()  # skills every card of this profile gets
    # skill_write and skill_patch in its skills toolset (issue 33); never for delegated cards
    skills_write: bool = False
    # Work in the card's workspace (issue 13).
    description: str = ""  # one line; the delegate tool shows it to a lead choosing a profile
    approval: str | None = None  # deny | ask | allow; None: ask, or deny for delegated cards
    dangerous_patterns: tuple[str, ...] = ()  # regexes, beside the built-in list
    max_file_bytes: int = 1_048_576  # the largest file the file tools read or write
    max_workspace_bytes: int = 4 << 30  # the disk a card's workspace may take; past it: blocked
    command_timeout_s: float = 120.0  # terminal's default; always within the card's time
    # false: commands run without a network and web tools refuse; a list of host patterns
    # (kanban.state.network): only those, through the worker's proxy.
    network: bool | tuple[str, ...] = True
    network_hosts: Mapping[str, str] = field(default_factory=dict)  # name = "IP", no DNS
    sandbox: str = "auto"  # auto: bwrap when it works here | required: refuse without | off
    # Absolute paths (`~`: the real home) a card's sandbox shows read-only / lets it write,
    # beside the system, its workspace, its own HOME and a private /tmp.
    sandbox_read: tuple[str, ...] = ()
    sandbox_write: tuple[str, ...] = ()
    workspace: str | None = None  # the cards' default workspace spec (None: scratch)
    # orchestrator: its delegated cards may delegate in turn (issue 16), and it gets
    # kanban_list and kanban_unblock (issue 19); decomposer: it splits triaged cards.
    role: str = "leaf"
    # A root card's budget for its whole tree (itself and every card below it): no child
    # starts, and no more are delegated, once the tree has spent it.
    tree_token_budget: int | None = None
    tree_max_cost: float | None = None  # dollars
    review: str | None = None  # the cards' default review gate: verify:CMD, reviewer:P, human

    def resolved_model(self, env: Mapping[str, str]) -> str:
        """The model spec; with no API key configured the default is the scripted demo."""
        if self.model:
            return self.model
        if env.get("OPENAI_API_KEY"):
            return DEFAULT_OPENAI_MODEL
        if env.get("ANTHROPIC_API_KEY"):
            return DEFAULT_ANTHROPIC_MODEL
        return SCRIPTED_DEMO


BUILTIN_PROFILES = {
    "default": Profile(description="Board tools only: plans, notes and answers in text."),
    "general": Profile(name="general", toolsets=("kanban", "file", "terminal", "web"),
                       description="General work in its workspace: files, shell commands, "
                                   "web pages and search."),
    "bash": Profile(name="bash", toolsets=("kanban", "terminal"),
                    description="Shell work: runs commands in its workspace, no web tools."),
    "lead": Profile(name="lead", toolsets=("kanban", "file", "terminal", "web"),
                    description="The lead of `kanban run`; its toolsets bound what it may grant "
                                "its children."),
}


@dataclass(frozen=True)
class McpServer:
    """An MCP server from `[mcp.NAME]`: a stdio command, or a streamable HTTP url."""

    name: str = ""
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0  # one tool call
    startup_timeout_s: float = 30.0


@dataclass(frozen=True)
class WebSettings:
    """`[web]`: what web_fetch may reach and how web_search finds results."""

    allow_loopback: bool = False
    allow_private: bool = False
    max_bytes: int = 2_000_000
    timeout_s: float = 20.0
    max_redirects: int = 5
    search: str | None = None  # searxng | brave | tavily
    search_url: str | None = None
    search_key_env: str | None = None  # the variable holding the search API key


@dataclass(frozen=True)
class Limits:
    max_workers: int = 0  # 0: derived from cores and memory
    lease_s: float = 30.0
    synchronous: str = "NORMAL"
    max_children_per_call: int = 3
    max_concurrent_children: int = 3
    max_depth: int = 1
    max_children_per_card: int = 10
    child_timeout_s: float = 600.0
    child_max_attempts: int = 2
    child_max_turns: int = 20
    max_attachment_mb: float = 25.0
    never_granted: tuple[str, ...] = ()  # toolsets a lead may never hand a child


@dataclass(frozen=True)
class ModelPrice:
    """`[prices."MODEL"]`: US dollars per million tokens (cached: input read from cache)."""

    input: float = 0.0
    output: float = 0.0
    cached: float | None = None


@dataclass(frozen=True)
class Delivery:
    """How cron results and notifications reach their targets (`kanban cron add --deliver`,
    `kanban notify add --deliver`)."""

    webhook_secret: str | None = None  # signs webhook bodies; $KANBAN_WEBHOOK_SECRET wins
    webhook_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    max_attempts: int = 8
    retry_base_s: float = 5.0  # backoff: base·2^(attempt-1), jittered, capped
    retry_cap_s: float = 3600.0
    poll_s: float = 1.0  # how often a dispatcher looks for results to deliver


@dataclass(frozen=True)
class SkillSettings:
    """`[skills]`: when the curator marks an unused agent-written skill stale, then archives it."""

    stale_after_days: float = 30.0
    archive_after_days: float = 90.0


@dataclass(frozen=True)
class Config:
    limits: Limits = field(default_factory=Limits)
    profiles: Mapping[str, Profile] = field(default_factory=lambda: dict(BUILTIN_PROFILES))
    path: Path | None = None
    delivery: Delivery = field(default_factory=Delivery)
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)
    hooks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # event → module:fn
    hook_entry_points: bool = True  # also load the `kanban.hooks` entry-point group
    mcp: Mapping[str, McpServer] = field(default_factory=dict)
    web: WebSettings = field(default_factory=WebSettings)
    skills: SkillSettings = field(default_factory=SkillSettings)

    def profile(self, name: str) -> Profile:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ConfigError(f"unknown profile {name!r} (known: {known})") from None

    def workspaces(self) -> dict[str, str | None]:
        """Each profile's default workspace spec (None: scratch)."""
        return {name: p.workspace for name, p in self.profiles.items()}


def default_max_workers() -> int:
    """Two workers per core, capped by memory at ~100 MiB each."""
    cores = os.cpu_count() or 1
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        by_memory = max(1, pages // (100 * 2**20))
    except (ValueError, OSError):
        by_memory = 8
    return max(1, min(cores * 2, by_memory, 32))
