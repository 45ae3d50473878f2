"""`[profiles.NAME]` tables: each read over its built-in or default profile, then checked."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kanban.state.config import BUILTIN_PROFILES, McpServer, Profile
from kanban.state.config_values import build, check_bounds
from kanban.state.errors import ConfigError
from kanban.state.network import parse_network, parse_pins
from kanban.state.sandbox_paths import grants, hidden_program

APPROVAL_MODES = ("deny", "ask", "allow")
WORKSPACE_SPEC = re.compile(r"^(scratch|worktree|parent|dir:.+)$")
PROFILE_ROLES = ("leaf", "orchestrator", "decomposer")
REVIEW_GATE = re.compile(r"^(human|verify:.*\S.*|reviewer:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$")
# The providers a model spec may name (kept equal to kanban.agent.model.PROVIDERS by a test;
# the store does not import the agent runtime).
MODEL_PROVIDERS = ("openai", "openai-responses", "anthropic", "scripted")
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def parse_profiles(table: Mapping[str, Any], mcp: Mapping[str, McpServer],
                   where: str, folder: Path | None = None) -> dict[str, Profile]:
    """The built-in profiles, with those of `table` added or laid over them (`folder`: the
    board's, which no sandbox grant may reach into)."""
    profiles: dict[str, Profile] = dict(BUILTIN_PROFILES)
    for name, values in table.items():
        base = profiles.get(name, Profile(name=name))
        section = f"{where}: [profiles.{name}]"
        if not _PROFILE_NAME.match(str(name)):
            raise ConfigError(f"{section}: a profile name is 1-64 letters, digits, '.', '_' "
                              "or '-'")
        listed = _listed(_listed(_listed(_plain(values), "api_key_env"), "sandbox_read"),
                         "sandbox_write")
        profiles[name] = _granted(_network(build(Profile, listed, section, base=base), values,
                                           section), section, folder)
        check_bounds(profiles[name], values, section)
        _check_profile(profiles[name], section)
        _check_models(profiles[name], section)
        _check_work(profiles[name], mcp, section)
        _check_servers(profiles[name], mcp, section, folder)
    return profiles


_NETWORK_KEYS = ("network", "network_hosts")


def _plain(values: Any) -> Any:
    """The table without the network keys, which `_network` reads."""
    if not isinstance(values, Mapping):
        return values
    return {k: v for k, v in values.items() if k not in _NETWORK_KEYS}


def _network(profile: Profile, values: Mapping[str, Any], section: str) -> Profile:
    """`network` (true, false or host patterns) and `network_hosts` (pinned addresses)."""
    changes: dict[str, Any] = {}
    if "network" in values:
        changes["network"] = parse_network(values["network"], f"{section}.network")
    if "network_hosts" in values:
        changes["network_hosts"] = parse_pins(values["network_hosts"],
                                              f"{section}.network_hosts")
    return replace(profile, **changes) if changes else profile


def _granted(profile: Profile, section: str, folder: Path | None) -> Profile:
    """The profile with its sandbox grants checked and `~` expanded."""
    if not profile.sandbox_read and not profile.sandbox_write:
        return profile
    def checked(key: str) -> tuple[str, ...]:
        return grants(getattr(profile, key), key, section, folder=folder,
                      network=profile.network)

    return replace(profile, sandbox_read=checked("sandbox_read"),
                   sandbox_write=checked("sandbox_write"))


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


def _check_servers(profile: Profile, mcp: Mapping[str, McpServer], where: str,
                   folder: Path | None) -> None:
    """A sandboxed profile's stdio servers must not start from the board's folder: the
    sandbox hides it, so they could not start."""
    if profile.sandbox == "off":
        return
    for toolset in profile.toolsets:
        server = mcp.get(toolset[4:]) if toolset.startswith("mcp:") else None
        hidden = hidden_program(server.command, server.args, folder) if server else None
        if hidden:
            raise ConfigError(f"{where}.toolsets: [mcp.{toolset[4:]}] runs {hidden}, inside "
                              f"the board's folder, which the sandbox hides; move it out or "
                              'give the profile sandbox = "off"')
