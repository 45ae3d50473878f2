"""config.toml's tables other than `[profiles.NAME]`: each a frozen dataclass whose fields
declare their keys (kanban.state.config_keys). A class docstring introduces its table in
the generated reference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kanban.state.config_keys import Range, setting
from kanban.state.config_values import HOOK_NAMES, NON_NEGATIVE

DAY = 24 * 3600.0


@dataclass(frozen=True)
class Limits:
    """`[limits]`: dispatcher-wide limits, and what a lead may delegate."""

    max_workers: int = setting(0, "Workers per dispatcher; 0: two per core, capped by "
                               "memory and at 32.",
                               range=Range(0, 1024))
    lease_s: float = setting(30.0, "Seconds a claimed card stays claimed without a heartbeat.",
                             range=Range(1, 3600))
    synchronous: str = setting("NORMAL", "SQLite's synchronous setting (FULL: also survive "
                               "power loss, at some write speed).", choices=("NORMAL", "FULL"),
                               ignore_case=True)
    max_children_per_call: int = setting(3, "Tasks one delegate call may create.",
                                         range=Range(1, 100))
    max_concurrent_children: int = setting(3, "A card's unfinished children at once.",
                                           range=Range(1, 100))
    max_depth: int = setting(1, "How deep delegation goes (1: children cannot delegate).",
                             range=Range(0, 10))
    max_children_per_card: int = setting(10, "Every child a card ever makes, by delegate or "
                                         "kanban_create.", range=Range(1, 1000))
    child_timeout_s: float = setting(600.0, "Seconds a delegated card may run.",
                                     range=Range(1, 7 * DAY))
    child_max_attempts: int = setting(2, "Attempts a delegated card gets.", range=Range(1, 100))
    child_max_turns: int = setting(20, "Delegated cards: at most this many turns, whatever "
                                   "their profile says.", range=Range(1, 1000))
    max_attachment_mb: float = setting(25.0, "`kanban attach` refuses larger files (MB).")
    never_granted: tuple[str, ...] = setting((), "Toolsets a lead may never hand a child "
                                             "(delegate never is).")


@dataclass(frozen=True)
class McpServer:
    """`[mcp.NAME]`: an MCP server, a stdio command or a streamable HTTP url (exactly one of
    the two); a profile listing the toolset `mcp:NAME` gives its workers the server's tools."""

    name: str = ""
    command: str | None = setting(None, "The program a worker starts (stdio), in the card's "
                                  "workspace; give command or url.")
    args: tuple[str, ...] = setting((), "The command's arguments.")
    env: Mapping[str, str] = setting({}, "Environment variables for the command (it gets no "
                                     "credentials but these).")
    url: str | None = setting(None, "A streamable HTTP server's address; give command or url.")
    headers: Mapping[str, str] = setting({}, "HTTP headers sent to the url server.")
    timeout_s: float = setting(60.0, "Seconds one tool call may take.")
    startup_timeout_s: float = setting(30.0, "Seconds the server may take to start.")


@dataclass(frozen=True)
class WebSettings:
    """`[web]`: what web_fetch may reach and how web_search finds results."""

    allow_loopback: bool = setting(False, "web_fetch may reach loopback addresses.")
    allow_private: bool = setting(False, "web_fetch, and sandboxed commands on a network of "
                                  "their own, may reach private-network addresses (a LAN's, "
                                  "a cloud network's).")
    max_bytes: int = setting(2_000_000, "The largest page web_fetch reads (bytes).")
    timeout_s: float = setting(20.0, "Seconds one fetch may take.")
    max_redirects: int = setting(5, "Redirects one fetch follows.")
    search: str | None = setting(None, "web_search's engine (unset: web_search says it is "
                                 "not set up).",
                                 choices=("searxng", "brave", "tavily"))
    search_url: str | None = setting(None, "The search engine's address (SearXNG's; optional "
                                     "for brave and tavily).")
    search_key_env: str | None = setting(None, "The environment variable holding the search "
                                         "API key (brave, tavily).")


@dataclass(frozen=True)
class ModelPrice:
    """`[prices."MODEL"]`: US dollars per million tokens, over the built-in price table."""

    input: float = setting(0.0, "Dollars per million input tokens.", kind=NON_NEGATIVE,
                           required=True)
    output: float = setting(0.0, "Dollars per million output tokens.", kind=NON_NEGATIVE,
                            required=True)
    cached: float | None = setting(None, "Dollars per million input tokens read from the "
                                   "provider's cache (unset: the input price).",
                                   kind=NON_NEGATIVE)


@dataclass(frozen=True)
class Delivery:
    """`[delivery]`: how cron results and notifications reach their targets
    (`kanban cron add --deliver`, `kanban notify add --deliver`)."""

    webhook_secret: str | None = setting(None, "Signs webhook bodies; `$KANBAN_WEBHOOK_SECRET` "
                                         "wins.")
    webhook_timeout_s: float = setting(10.0, "Seconds one webhook request may take.")
    command_timeout_s: float = setting(60.0, "Seconds a cmd: target may run.")
    max_attempts: int = setting(8, "Tries per delivery; then it stays failed until `kanban "
                                "cron redeliver` or `kanban notify redeliver`.",
                                range=Range(1, 100))
    retry_base_s: float = setting(5.0, "Backoff between tries: base·2^(attempt-1) seconds, "
                                  "jittered, capped.")
    retry_cap_s: float = setting(3600.0, "The longest wait between tries (seconds).")
    poll_s: float = setting(1.0, "How often a dispatcher looks for results to deliver "
                            "(seconds).")


@dataclass(frozen=True)
class SkillSettings:
    """`[skills]`: when the curator marks an unused agent-written skill stale, then archives it."""

    stale_after_days: float = setting(30.0, "Days unused before a skill is marked stale.",
                                      range=Range(1, 3650))
    archive_after_days: float = setting(90.0, "Days unused before a skill is archived (at "
                                        "least stale_after_days).", range=Range(1, 3650))


@dataclass(frozen=True)
class HookSettings:
    """`[hooks]`: Python functions called at points of every agent run, named
    "package.module:function" (one name or a list per event)."""

    pre_tool: tuple[str, ...] = setting((), "Before each tool call; a string returned (or "
                                        "False) vetoes it.", kind=HOOK_NAMES)
    post_tool: tuple[str, ...] = setting((), "After each tool call; a string returned "
                                         "replaces the result.", kind=HOOK_NAMES)
    on_turn: tuple[str, ...] = setting((), "After each model turn (observes).", kind=HOOK_NAMES)
    on_finish: tuple[str, ...] = setting((), "When a run ends (observes).", kind=HOOK_NAMES)
    entry_points: bool = setting(True, "Also load the kanban.hooks entry-point group.")


__all__ = ["DAY", "Delivery", "HookSettings", "Limits", "McpServer",
           "ModelPrice", "SkillSettings", "WebSettings"]
