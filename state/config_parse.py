"""config.toml's tables, read and checked into a Config (kanban.state.config)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kanban.state.config import (
    Config,
    Delivery,
    Limits,
    McpServer,
    ModelPrice,
    SkillSettings,
    WebSettings,
)
from kanban.state.config_values import build, check_bounds
from kanban.state.errors import ConfigError
from kanban.state.profile_parse import parse_profiles

HOOK_EVENTS = ("pre_tool", "post_tool", "on_turn", "on_finish")


def parse_config(raw: Mapping[str, Any], path: Path | None = None) -> Config:
    where = str(path or "config")
    unknown = sorted(set(raw) - {"limits", "profiles", "delivery", "prices", "hooks", "mcp",
                                 "web", "skills"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (the tables are [limits], "
                          "[profiles.NAME], [delivery], [prices.MODEL], [hooks], [mcp.NAME], "
                          "[web] and [skills])")
    limits = build(Limits, raw.get("limits", {}), f"{where}: [limits]")
    delivery = build(Delivery, raw.get("delivery", {}), f"{where}: [delivery]")
    if limits.synchronous.upper() not in ("NORMAL", "FULL"):
        raise ConfigError(f"{where}: [limits].synchronous must be NORMAL or FULL")
    check_bounds(limits, raw.get("limits", {}), f"{where}: [limits]")
    check_bounds(delivery, raw.get("delivery", {}), f"{where}: [delivery]")
    mcp = {name: _mcp_server(name, values, f"{where}: [mcp.{name}]")
           for name, values in _table(raw, "mcp", where).items()}
    profiles = parse_profiles(_table(raw, "profiles", where), mcp, where,
                              folder=path.parent if path is not None else None)
    web = build(WebSettings, raw.get("web", {}), f"{where}: [web]")
    if web.search not in (None, "searxng", "brave", "tavily"):
        raise ConfigError(f"{where}: [web].search must be searxng, brave or tavily")
    skills = _skills(raw.get("skills", {}), f"{where}: [skills]")
    prices = _prices(raw.get("prices", {}), where)
    hooks, entry_points = _hooks(raw.get("hooks", {}), where)
    return Config(limits=limits, profiles=profiles, path=path, delivery=delivery,
                  prices=prices, hooks=hooks, hook_entry_points=entry_points, mcp=mcp,
                  web=web, skills=skills)


def _skills(table: Any, where: str) -> SkillSettings:
    settings = build(SkillSettings, table, where)
    check_bounds(settings, table, where)
    if settings.archive_after_days < settings.stale_after_days:
        raise ConfigError(f"{where}.archive_after_days must be at least stale_after_days")
    return settings


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
    server = build(McpServer, values, where, base=McpServer(name=name))
    if (server.command is None) == (server.url is None):
        raise ConfigError(f"{where} needs either command (stdio) or url (streamable HTTP)")
    return server

