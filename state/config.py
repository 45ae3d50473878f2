"""config.toml next to the database: limits and named agent profiles."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from state.errors import ConfigError

DEFAULT_OPENAI_MODEL = "openai:gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "anthropic:claude-sonnet-4-5"
SCRIPTED_DEMO = "scripted:demo"


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

    def resolved_model(self, env: Mapping[str, str]) -> str:
        """The model spec; with no API key configured the default is the scripted demo."""
        if self.model:
            return self.model
        if env.get("OPENAI_API_KEY"):
            return DEFAULT_OPENAI_MODEL
        if env.get("ANTHROPIC_API_KEY"):
            return DEFAULT_ANTHROPIC_MODEL
        return SCRIPTED_DEMO


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


@dataclass(frozen=True)
class Config:
    limits: Limits = field(default_factory=Limits)
    profiles: Mapping[str, Profile] = field(default_factory=lambda: {"default": Profile()})
    path: Path | None = None

    def profile(self, name: str) -> Profile:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ConfigError(f"unknown profile {name!r} (known: {known})") from None


def load_config(path: Path) -> Config:
    """Read config.toml; a missing file gives the defaults."""
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return Config(path=path)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: malformed config: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    return parse_config(raw, path)


def parse_config(raw: Mapping[str, Any], path: Path | None = None) -> Config:
    where = str(path or "config")
    unknown = sorted(set(raw) - {"limits", "profiles"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (the tables are [limits] "
                          "and [profiles.NAME])")
    limits = _build(Limits, raw.get("limits", {}), f"{where}: [limits]")
    if limits.synchronous.upper() not in ("NORMAL", "FULL"):
        raise ConfigError(f"{where}: [limits].synchronous must be NORMAL or FULL")
    profiles: dict[str, Profile] = {"default": Profile()}
    table = raw.get("profiles", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [profiles] must be a table")
    for name, values in table.items():
        base = profiles.get(name, Profile(name=name))
        profiles[name] = _build(Profile, values, f"{where}: [profiles.{name}]", base=base)
    return Config(limits=limits, profiles=profiles, path=path)


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
    if "tuple" in kind:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        return tuple(value)
    if kind.startswith("float"):
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
