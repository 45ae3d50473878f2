"""config.toml next to the database: limits and named agent profiles."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kanban.state.errors import ConfigError

DEFAULT_OPENAI_MODEL = "openai:gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "anthropic:claude-sonnet-4-5"
SCRIPTED_DEMO = "scripted:demo"
APPROVAL_MODES = ("deny", "ask", "allow")
WORKSPACE_SPEC = re.compile(r"^(scratch|worktree|parent|dir:.+)$")
PROFILE_ROLES = ("leaf", "orchestrator", "decomposer")
REVIEW_GATE = re.compile(r"^(human|verify:.*\S.*|reviewer:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$")
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
    # Work in the card's workspace (issue 13).
    description: str = ""  # one line; the delegate tool shows it to a lead choosing a profile
    approval: str | None = None  # deny | ask | allow; None: ask, or deny for delegated cards
    dangerous_patterns: tuple[str, ...] = ()  # regexes, beside the built-in list
    max_file_bytes: int = 1_048_576  # the largest file the file tools read or write
    command_timeout_s: float = 120.0  # terminal's default; always within the card's time
    network: bool = True  # false: commands run without a network; web tools refuse
    sandbox: str = "auto"  # auto: bwrap when it works here | required: refuse without | off
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
    """How cron results reach their targets (`kanban cron add --deliver`)."""

    webhook_secret: str | None = None  # signs webhook bodies; $KANBAN_WEBHOOK_SECRET wins
    webhook_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    max_attempts: int = 8
    retry_base_s: float = 5.0  # backoff: base·2^(attempt-1), jittered, capped
    retry_cap_s: float = 3600.0
    poll_s: float = 1.0  # how often a dispatcher looks for results to deliver


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

    def profile(self, name: str) -> Profile:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ConfigError(f"unknown profile {name!r} (known: {known})") from None

    def workspaces(self) -> dict[str, str | None]:
        """Each profile's default workspace spec (None: scratch)."""
        return {name: p.workspace for name, p in self.profiles.items()}


def load_config(path: Path, *, required: bool = False) -> Config:
    """Read config.toml; a missing file gives the defaults, unless `required`."""
    import tomllib  # here: with no config.toml, a command never pays for the parser

    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        if required:
            raise ConfigError(f"{path}: no such config file") from None
        return Config(path=path)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: malformed config: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    return parse_config(raw, path)


def resolve_config(home: Path, env: Mapping[str, str] | None = None) -> Config:
    """$KANBAN_CONFIG if set (it must exist), else config.toml in `home` (or the defaults)."""
    env = os.environ if env is None else env
    explicit = env.get(CONFIG_ENV)
    if explicit:
        return load_config(Path(explicit).expanduser(), required=True)
    return load_config(home / "config.toml")


def worker_config(env: Mapping[str, str]) -> Config:
    """A worker's config: exactly the file its dispatcher used ("" means the dispatcher ran
    on the defaults). Missing or unreadable is an error, never a quiet default."""
    if CONFIG_ENV not in env:
        raise ConfigError(f"worker environment incomplete: {CONFIG_ENV} is not set")
    path = env[CONFIG_ENV]
    return load_config(Path(path), required=True) if path else Config()


def parse_config(raw: Mapping[str, Any], path: Path | None = None) -> Config:
    where = str(path or "config")
    unknown = sorted(set(raw) - {"limits", "profiles", "delivery", "prices", "hooks", "mcp",
                                 "web"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (the tables are [limits], "
                          "[profiles.NAME], [delivery], [prices.MODEL], [hooks], [mcp.NAME] "
                          "and [web])")
    limits = _build(Limits, raw.get("limits", {}), f"{where}: [limits]")
    delivery = _build(Delivery, raw.get("delivery", {}), f"{where}: [delivery]")
    if limits.synchronous.upper() not in ("NORMAL", "FULL"):
        raise ConfigError(f"{where}: [limits].synchronous must be NORMAL or FULL")
    _check_bounds(limits, raw.get("limits", {}), f"{where}: [limits]")
    _check_bounds(delivery, raw.get("delivery", {}), f"{where}: [delivery]")
    profiles: dict[str, Profile] = dict(BUILTIN_PROFILES)
    mcp = {name: _mcp_server(name, values, f"{where}: [mcp.{name}]")
           for name, values in _table(raw, "mcp", where).items()}
    for name, values in _table(raw, "profiles", where).items():
        base = profiles.get(name, Profile(name=name))
        section = f"{where}: [profiles.{name}]"
        if not _PROFILE_NAME.match(str(name)):
            raise ConfigError(f"{section}: a profile name is 1-64 letters, digits, '.', '_' "
                              "or '-'")
        profiles[name] = _build(Profile, _listed(values, "api_key_env"), section, base=base)
        _check_bounds(profiles[name], values, section)
        _check_profile(profiles[name], section)
        _check_models(profiles[name], section)
        _check_work(profiles[name], mcp, section)
    web = _build(WebSettings, raw.get("web", {}), f"{where}: [web]")
    if web.search not in (None, "searxng", "brave", "tavily"):
        raise ConfigError(f"{where}: [web].search must be searxng, brave or tavily")
    prices = _prices(raw.get("prices", {}), where)
    hooks, entry_points = _hooks(raw.get("hooks", {}), where)
    return Config(limits=limits, profiles=profiles, path=path, delivery=delivery,
                  prices=prices, hooks=hooks, hook_entry_points=entry_points, mcp=mcp,
                  web=web)


HOOK_EVENTS = ("pre_tool", "post_tool", "on_turn", "on_finish")
# The providers a model spec may name (kept equal to kanban.agent.model.PROVIDERS by a test;
# the store does not import the agent runtime).
MODEL_PROVIDERS = ("openai", "openai-responses", "anthropic", "scripted")
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_DAY = 24 * 3600.0
# Sensible ranges: a value outside is a typo or a unit mistake, refused with its range.
BOUNDS: dict[str, tuple[float, float]] = {
    "max_workers": (0, 1024), "lease_s": (1, 3600), "max_children_per_call": (1, 100),
    "max_concurrent_children": (1, 100), "max_depth": (0, 10),
    "max_children_per_card": (1, 1000), "child_timeout_s": (1, 7 * _DAY),
    "child_max_attempts": (1, 100), "child_max_turns": (1, 1000),
    "timeout_s": (1, 7 * _DAY), "max_turns": (1, 1000), "token_budget": (1, 10**9),
    "max_concurrent": (1, 1024), "max_attempts": (1, 100), "tree_token_budget": (1, 10**12),
}


def _check_bounds(record: Any, given: Any, section: str) -> None:
    for key in given if isinstance(given, Mapping) else ():
        if key in BOUNDS:
            low, high = BOUNDS[key]
            value = getattr(record, key)
            if not low <= value <= high:
                raise ConfigError(f"{section}.{key} = {value:g} is out of range "
                                  f"({low:g} to {high:g})")


def _check_models(profile: Profile, section: str) -> None:
    """The profile's model and fallbacks are model specs; its base URL is a URL."""
    for key, spec in [("model", profile.model), *(("fallback", f) for f in profile.fallback)]:
        problem = None if spec is None else model_spec_problem(spec)
        if problem:
            raise ConfigError(f"{section}.{key} = {spec!r}: {problem}")
    if profile.base_url is not None and not profile.base_url.startswith(("http://",
                                                                          "https://")):
        raise ConfigError(f"{section}.base_url = {profile.base_url!r}: must be an http:// or "
                          "https:// URL")
    if not profile.toolsets:
        raise ConfigError(f"{section}.toolsets is empty (give at least \"kanban\")")


def model_spec_problem(spec: str) -> str | None:
    """Why `spec` is not a model spec (`provider:MODEL`), or None when it is one."""
    provider, colon, name = spec.partition(":")
    if not colon or not name.strip():
        return ("a model spec looks like openai:MODEL, anthropic:MODEL or scripted:NAME")
    if provider not in MODEL_PROVIDERS:
        return f"unknown provider {provider!r} (known: {', '.join(MODEL_PROVIDERS)})"
    return None


def _listed(values: Any, key: str) -> Any:
    """A single string where a list of strings is expected becomes a list of one."""
    if isinstance(values, Mapping) and isinstance(values.get(key), str):
        return {**values, key: [values[key]]}
    return values


def _check_profile(profile: Profile, where: str) -> None:
    if profile.api not in (None, "chat", "responses"):
        raise ConfigError(f"{where}.api must be \"chat\" or \"responses\"")
    if profile.reasoning not in (None, "low", "medium", "high"):
        raise ConfigError(f"{where}.reasoning must be \"low\", \"medium\" or \"high\"")
    if profile.sandbox not in ("auto", "required", "off"):
        raise ConfigError(f"{where}.sandbox must be \"auto\", \"required\" or \"off\"")
    if not 0 < profile.compress_at < 1:
        raise ConfigError(f"{where}.compress_at must be between 0 and 1")
    if min(profile.max_tool_calls_per_turn, profile.max_argument_chars,
           profile.max_message_chars, profile.max_transcript_chars) < 1 \
            or profile.max_message_chars < 1000 \
            or profile.max_transcript_chars < 10 * profile.max_message_chars:
        raise ConfigError(f"{where}: max_tool_calls_per_turn and max_argument_chars must be "
                          "at least 1, max_message_chars at least 1000, and "
                          "max_transcript_chars at least 10 times max_message_chars")
    if profile.max_parallel_tools < 1 or profile.tool_result_chars < 1000:
        raise ConfigError(f"{where}: max_parallel_tools must be at least 1 and "
                          "tool_result_chars at least 1000")


def _prices(table: Any, where: str) -> dict[str, ModelPrice]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [prices] must be a table of [prices.\"MODEL\"] tables")
    prices = {}
    for model, values in table.items():
        at = f"{where}: [prices.\"{model}\"]"
        if not isinstance(values, Mapping) or not {"input", "output"} <= set(values):
            raise ConfigError(f"{at} needs input and output (dollars per million tokens)")
        for key, value in values.items():
            if key not in ("input", "output", "cached"):
                raise ConfigError(f"{at}: unknown key {key!r}")
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{at}.{key} must be a non-negative number")
        prices[str(model)] = ModelPrice(float(values["input"]), float(values["output"]),
                                        None if "cached" not in values
                                        else float(values["cached"]))
    return prices


def _hooks(table: Any, where: str) -> tuple[dict[str, tuple[str, ...]], bool]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [hooks] must be a table")
    hooks: dict[str, tuple[str, ...]] = {}
    entry_points = True
    for key, value in table.items():
        if key == "entry_points":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: [hooks].entry_points must be true or false")
            entry_points = value
            continue
        if key not in HOOK_EVENTS:
            raise ConfigError(f"{where}: [hooks]: unknown event {key!r} (known: "
                              f"{', '.join(HOOK_EVENTS)}, entry_points)")
        specs = [value] if isinstance(value, str) else value
        if not isinstance(specs, list) or not all(
                isinstance(v, str) and ":" in v for v in specs):
            raise ConfigError(f"{where}: [hooks].{key} must list \"package.module:function\" "
                              "names")
        hooks[key] = tuple(specs)
    return hooks, entry_points


def _table(raw: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    table = raw.get(key, {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [{key}] must be a table")
    return table


def _mcp_server(name: str, values: Any, where: str) -> McpServer:
    server = _build(McpServer, values, where, base=McpServer(name=name))
    if (server.command is None) == (server.url is None):
        raise ConfigError(f"{where} needs either command (stdio) or url (streamable HTTP)")
    return server


def _check_work(profile: Profile, mcp: Mapping[str, McpServer], where: str) -> None:
    """The checks config alone can make; toolset names are checked against the registry by
    `kanban.toolsets.check_toolsets`."""
    if profile.approval is not None and profile.approval not in APPROVAL_MODES:
        raise ConfigError(f"{where}.approval must be one of: {', '.join(APPROVAL_MODES)}")
    if profile.workspace is not None and not WORKSPACE_SPEC.match(profile.workspace):
        raise ConfigError(f"{where}.workspace must be scratch, worktree, parent or dir:PATH")
    if profile.role not in PROFILE_ROLES:
        raise ConfigError(f"{where}.role must be one of: {', '.join(PROFILE_ROLES)}")
    if profile.review is not None and not REVIEW_GATE.match(profile.review):
        raise ConfigError(f"{where}.review must be verify:COMMAND, reviewer:PROFILE or human")
    for pattern in profile.dangerous_patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{where}.dangerous_patterns: bad regex {pattern!r}: {exc}") from None
    for toolset in profile.toolsets:
        if toolset.startswith("mcp:") and toolset[4:] not in mcp:
            raise ConfigError(f"{where}.toolsets: {toolset!r} names no [mcp.{toolset[4:]}] table")


def _build(cls: type, values: Any, where: str, base: Any = None) -> Any:
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where} must be a table")
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known or key == "name":
            raise ConfigError(f"{where}: unknown key {key!r}")
        kwargs[key] = _coerce(value, known[key].type, f"{where}.{key}")
    return replace(base, **kwargs) if base is not None else cls(**kwargs)


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    kind = str(annotation)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false")
        return value
    if kind.startswith("Mapping"):
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{where} must be a table of strings")
        return dict(value)
    if "tuple" in kind:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        return tuple(value)
    if "float" in kind:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or value <= 0:
            raise ConfigError(f"{where} must be a positive number")
        return float(value)
    if kind.startswith("int"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{where} must be a non-negative integer")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string")
    return value


def default_max_workers() -> int:
    """Two workers per core, capped by memory at ~100 MiB each."""
    cores = os.cpu_count() or 1
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        by_memory = max(1, pages // (100 * 2**20))
    except (ValueError, OSError):
        by_memory = 8
    return max(1, min(cores * 2, by_memory, 32))
