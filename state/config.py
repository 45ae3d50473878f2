"""config.toml next to the database: limits and named agent profiles, as records (read from
the file by kanban.state.config_file). The tables' keys are declared by their dataclasses
(kanban.state.config_tables, kanban.state.profile)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kanban.state.config_tables import (
    Delivery,
    HookSettings,
    Limits,
    McpServer,
    ModelPrice,
    SkillSettings,
    WebSettings,
)
from kanban.state.config_telemetry import TelemetrySettings
from kanban.state.errors import ConfigError
from kanban.state.profile import (
    BUILTIN_PROFILES,
    DEFAULT_ANTHROPIC_MODEL,
    DEFAULT_OPENAI_MODEL,
    SCRIPTED_DEMO,
    Profile,
)

__all__ = ["BUILTIN_PROFILES", "CONFIG_ENV", "DEFAULT_ANTHROPIC_MODEL", "DEFAULT_OPENAI_MODEL",
           "SCRIPTED_DEMO", "Config", "Delivery", "HookSettings", "Limits", "McpServer",
           "ModelPrice", "Profile", "SkillSettings", "WebSettings", "default_max_workers"]
CONFIG_ENV = "KANBAN_CONFIG"  # an explicit config file (must exist); also how workers get theirs


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
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)

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
