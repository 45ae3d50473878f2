"""config.toml's tables, read and checked into a Config (kanban.state.config).

TABLES lists every top-level table and the dataclass declaring its keys: the parser accepts
exactly these, and the reference (docs/reference/config.md) is generated from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kanban.state.config import (
    Config,
    Delivery,
    HookSettings,
    Limits,
    McpServer,
    ModelPrice,
    Profile,
    SkillSettings,
    WebSettings,
)
from kanban.state.config_keys import keys
from kanban.state.config_telemetry import TelemetrySettings, parse_telemetry
from kanban.state.config_values import build
from kanban.state.errors import ConfigError
from kanban.state.profile_parse import parse_profiles


@dataclass(frozen=True)
class Table:
    """A top-level table of config.toml and the dataclass whose fields declare its keys."""

    name: str
    record: type
    each: str | None = None  # "NAME": a table of such tables, one per name ([mcp.NAME])

    @property
    def heading(self) -> str:
        return f"[{self.name}.{self.each}]" if self.each else f"[{self.name}]"


TABLES = (
    Table("limits", Limits), Table("profiles", Profile, "NAME"), Table("delivery", Delivery),
    Table("prices", ModelPrice, '"MODEL"'), Table("hooks", HookSettings),
    Table("mcp", McpServer, "NAME"), Table("web", WebSettings), Table("skills", SkillSettings),
    Table("telemetry", TelemetrySettings),
)
HOOK_EVENTS = tuple(name for name in keys(HookSettings) if name != "entry_points")


def parse_config(raw: Mapping[str, Any], path: Path | None = None) -> Config:
    where = str(path or "config")
    unknown = sorted(set(raw) - {table.name for table in TABLES})
    if unknown:
        headings = [table.heading.replace('"', "") for table in TABLES]
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (the tables are "
                          f"{', '.join(headings[:-1])} and {headings[-1]})")
    limits = build(Limits, raw.get("limits", {}), f"{where}: [limits]")
    delivery = build(Delivery, raw.get("delivery", {}), f"{where}: [delivery]")
    mcp = {name: _mcp_server(name, values, f"{where}: [mcp.{name}]")
           for name, values in _table(raw, "mcp", where).items()}
    profiles = parse_profiles(_table(raw, "profiles", where), mcp, where,
                              folder=path.parent if path is not None else None)
    web = build(WebSettings, raw.get("web", {}), f"{where}: [web]")
    skills = _skills(raw.get("skills", {}), f"{where}: [skills]")
    prices = _prices(raw.get("prices", {}), where)
    hooks, entry_points = _hooks(raw.get("hooks", {}), f"{where}: [hooks]")
    return Config(limits=limits, profiles=profiles, path=path, delivery=delivery,
                  prices=prices, hooks=hooks, hook_entry_points=entry_points, mcp=mcp,
                  web=web, skills=skills,
                  telemetry=parse_telemetry(raw.get("telemetry", {}), f"{where}: [telemetry]"))


def _skills(table: Any, where: str) -> SkillSettings:
    settings: SkillSettings = build(SkillSettings, table, where)
    if settings.archive_after_days < settings.stale_after_days:
        raise ConfigError(f"{where}.archive_after_days must be at least stale_after_days")
    return settings


def _prices(table: Any, where: str) -> dict[str, ModelPrice]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [prices] must be a table of [prices.\"MODEL\"] tables")
    prices = {}
    for model, values in table.items():
        at = f"{where}: [prices.\"{model}\"]"
        if not isinstance(values, Mapping):
            raise ConfigError(f"{at} needs input and output (dollars per million tokens)")
        prices[str(model)] = build(ModelPrice, values, at)
    return prices


def _hooks(table: Any, where: str) -> tuple[dict[str, tuple[str, ...]], bool]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    known = keys(HookSettings)
    for key in table:
        if key not in known:
            raise ConfigError(f"{where}: unknown event {key!r} (known: {', '.join(known)})")
    settings = build(HookSettings, table, where)
    return {event: getattr(settings, event) for event in HOOK_EVENTS if event in table}, \
        settings.entry_points


def _table(raw: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    table = raw.get(key, {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: [{key}] must be a table")
    return table


def _mcp_server(name: str, values: Any, where: str) -> McpServer:
    server = build(McpServer, values, where, base=McpServer(name=name))
    if (server.command is None) == (server.url is None):
        raise ConfigError(f"{where} needs either command (stdio) or url (streamable HTTP)")
    return server
