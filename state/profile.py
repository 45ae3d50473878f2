"""`[profiles.NAME]`: how a card's agent runs. Each field declares its config key
(kanban.state.config_keys); kanban.state.profile_parse reads the tables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kanban.state.config_keys import Range, setting
from kanban.state.config_values import (
    HOST_ADDRESSES,
    MODEL,
    MODELS,
    NETWORK,
    REGEXES,
    STRING_OR_LIST,
    URL,
)

DEFAULT_OPENAI_MODEL = "openai:gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "anthropic:claude-sonnet-4-5"
SCRIPTED_DEMO = "scripted:demo"
DAY = 24 * 3600.0
WORKSPACE_SPEC = r"scratch|worktree|parent|dir:.+"
REVIEW_GATE = r"human|verify:.*\S.*|reviewer:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"


@dataclass(frozen=True)
class Profile:
    """`[profiles.NAME]`: how a card's agent runs (model, tools, limits). A table named
    after a built-in profile changes only the keys it gives."""

    name: str = "default"
    model: str | None = setting(None, "The model; unset: openai's or anthropic's default when "
                                "its API key is set, else scripted:demo.", kind=MODEL)
    toolsets: tuple[str, ...] = setting(("kanban",), "The tools its cards get: kanban, file, "
                                        "terminal, web, mcp:NAME or a plug-in's name.")
    base_url: str | None = setting(None, "The model's server (unset: `$OPENAI_BASE_URL` or "
                                   "`$ANTHROPIC_BASE_URL`, else the provider's).", kind=URL)
    timeout_s: float = setting(600.0, "Seconds a card's run may take.", range=Range(1, 7 * DAY))
    max_turns: int = setting(20, "Model turns per run.", range=Range(1, 1000))
    token_budget: int | None = setting(200_000, "Tokens a run may use.", range=Range(1, 10**9))
    max_concurrent: int | None = setting(None, "Cards of this profile running at once, per "
                                         "dispatcher (unset: no limit).", range=Range(1, 1024))
    max_attempts: int = setting(3, "Attempts a card gets.", range=Range(1, 100))
    # The agent runtime (issue 15): fallbacks, keys, API mode, reasoning, cost, context.
    fallback: tuple[str, ...] = setting((), "Models tried in order when the model keeps "
                                        "failing.", kind=MODELS)
    api_key_env: tuple[str, ...] = setting((), "Variables holding API keys for the model's "
                                           "provider, rotated on 429.", kind=STRING_OR_LIST)
    api: str | None = setting(None, "responses: openai:MODEL through the Responses API "
                              "(unset: chat).", choices=("chat", "responses"))
    reasoning: str | None = setting(None, "Thinking effort asked of the model.",
                                    choices=("low", "medium", "high"))
    max_cost: float | None = setting(None, "Dollars a card may spend, its delegated cards "
                                     "included.")
    context_window: int | None = setting(None, "The model's context in tokens (unset: from "
                                         "the model's name).")
    compress_at: float = setting(0.5, "Share of the window past which the middle of the "
                                 "conversation is summarised.", range=Range(0, 1, True))
    tool_result_chars: int = setting(16_000, "Longer tool results are cut (and saved whole).",
                                     range=Range(1000))
    max_parallel_tools: int = setting(8, "Tool calls of one turn running at once.",
                                      range=Range(1))
    # Bounds on model output (issue 21): each is an error result the model can act on.
    max_tool_calls_per_turn: int = setting(64, "A turn's further tool calls get an error "
                                           "result, unrun.", range=Range(1))
    max_argument_chars: int = setting(1_000_000, "One tool call's arguments; larger ones get "
                                      "an error result.", range=Range(1))
    max_message_chars: int = setting(64_000, "One stored transcript message keeps its head "
                                     "and tail within this.", range=Range(1000))
    max_transcript_chars: int = setting(4_000_000, "A card's stored transcript (at least 10 "
                                        "times max_message_chars); past it older tool results "
                                        "are stored cut.", range=Range(1))
    skills: tuple[str, ...] = setting((), "Skills every card of this profile gets.")
    skills_write: bool = setting(False, "Gives skill_write and skill_patch (never to delegated "
                                 "cards).")
    # Work in the card's workspace (issue 13).
    description: str = setting("", "One line the lead's delegate tool shows when it picks a "
                               "profile.")
    approval: str | None = setting(None, "Dangerous commands: refused, asked of a person, or "
                                   "run (unset: ask; delegated cards: deny).",
                                   choices=("deny", "ask", "allow"))
    dangerous_patterns: tuple[str, ...] = setting((), "Regexes of commands that need approval, "
                                                  "beside the built-in rules.", kind=REGEXES)
    max_file_bytes: int = setting(1_048_576, "The largest file the file tools read or write.")
    max_workspace_bytes: int = setting(4 << 30, "The disk a card's workspace (with its own HOME "
                                       "in a sandbox) may take; past it the command stops and "
                                       "the card blocks. The sandbox's private /tmp holds at "
                                       "most as much.",
                                       range=Range(1 << 20, 1 << 50))
    max_workspace_files: int = setting(500_000, "How many files and folders a card's workspace "
                                       "(with its own HOME in a sandbox) may hold, and apart "
                                       "from it the sandbox's /tmp and /dev/shm; past it the "
                                       "command stops and the card blocks (an empty file takes "
                                       "no disk, but an inode or kernel memory).",
                                       range=Range(100, 1 << 32))
    max_processes: int = setting(4096, "How many processes a card's sandbox may run at once; "
                                 "past it the command stops, every process of the sandbox "
                                 "with it, and the card blocks (a fork bomb: root's process "
                                 "limit does not hold).", range=Range(16, 1 << 22))
    max_memory_bytes: int = setting(8 << 30, "How much memory (no file's: heap, "
                                    "shared memory they made) a card's sandbox's "
                                    "processes may hold together; past it the command stops, "
                                    "every process of the sandbox with it, and the card "
                                    "blocks. Counted while the command runs (a burst between "
                                    "two looks is the OOM killer's, which takes a sandboxed "
                                    "command first).", range=Range(64 << 20, 1 << 50))
    command_timeout_s: float = setting(120.0, "The terminal's default seconds per command, "
                                       "always within the card's time.")
    network: bool | tuple[str, ...] = setting(True, "false: commands and MCP servers get no "
                                              "network and web tools refuse; a list: only "
                                              "those hosts (name, *.domain or IP).",
                                              kind=NETWORK)
    reach_host: bool = setting(False, "true: sandboxed commands and MCP servers with a "
                               "network also reach this host's own services (its loopback "
                               "and addresses: a local test database); false gives them a "
                               "network of their own where these do not answer "
                               "(slirp4netns).")
    network_hosts: Mapping[str, str] = setting({}, "With a network list: names the proxy and "
                                               "web_fetch reach at this address, no DNS.",
                                               kind=HOST_ADDRESSES)
    sandbox: str = setting("auto", "auto: bubblewrap where it works; required: refuse to run "
                           "without; off.", choices=("auto", "required", "off"))
    # Beside the system, its workspace, its own HOME and a private /tmp.
    sandbox_read: tuple[str, ...] = setting((), "Absolute paths (~: your home) the sandbox "
                                            "shows read-only.", kind=STRING_OR_LIST)
    sandbox_write: tuple[str, ...] = setting((), "Absolute paths the sandbox lets it write; "
                                             "never the board's folder.", kind=STRING_OR_LIST)
    workspace: str | None = setting(None, "The cards' default workspace (unset: scratch).",
                                    choices=("scratch", "worktree", "parent", "dir:PATH"),
                                    pattern=WORKSPACE_SPEC)
    role: str = setting("leaf", "orchestrator: its children may delegate in turn (within "
                        "max_depth) and it gets kanban_list and kanban_unblock; decomposer: "
                        "it splits triaged cards.",
                        choices=("leaf", "orchestrator", "decomposer"))
    tree_token_budget: int | None = setting(None, "Tokens a root card's whole tree (it and every "
                                            "card below it) may use; then no child starts.",
                                            range=Range(1, 10**12))
    tree_max_cost: float | None = setting(None, "Dollars a root card's whole tree may spend.")
    review: str | None = setting(None, "The default review gate of cards added with it.",
                                 choices=("verify:COMMAND", "reviewer:PROFILE", "human"),
                                 pattern=REVIEW_GATE)

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
