"""`[profiles.NAME]` tables: each read over its built-in or default profile, then checked
across keys and tables (each key alone is checked by its declaration in
kanban.state.profile)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kanban.state.config_tables import McpServer
from kanban.state.config_values import MODEL_PROVIDERS, build, model_spec_problem
from kanban.state.errors import ConfigError
from kanban.state.profile import BUILTIN_PROFILES, Profile
from kanban.state.sandbox_paths import grants, hidden_program

__all__ = ["MODEL_PROVIDERS", "model_spec_problem", "parse_profiles"]
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
        profile = _granted(build(Profile, values, section, base=base), section, folder)
        _check_profile(profile, mcp, section)
        _check_servers(profile, mcp, section, folder)
        profiles[name] = profile
    return profiles


def _granted(profile: Profile, section: str, folder: Path | None) -> Profile:
    """The profile with its sandbox grants checked and `~` expanded."""
    if not profile.sandbox_read and not profile.sandbox_write:
        return profile
    def checked(key: str) -> tuple[str, ...]:
        return grants(getattr(profile, key), key, section, folder=folder,
                      network=profile.network)

    return replace(profile, sandbox_read=checked("sandbox_read"),
                   sandbox_write=checked("sandbox_write"))


def _check_profile(profile: Profile, mcp: Mapping[str, McpServer], where: str) -> None:
    """What no single key's declaration can check; toolset names are checked against the
    registry by `kanban.toolsets.check_toolsets`."""
    if not profile.toolsets:
        raise ConfigError(f"{where}.toolsets is empty (give at least \"kanban\")")
    if profile.max_transcript_chars < 10 * profile.max_message_chars:
        raise ConfigError(f"{where}.max_transcript_chars must be at least 10 times "
                          "max_message_chars")
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
