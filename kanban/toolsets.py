"""Toolset names: the built-in ones, `mcp:NAME` from config, and plug-ins registered by
other packages under the `kanban.toolsets` entry-point group.

A plug-in entry point names a callable `register(registry: ToolRegistry) -> None` that
registers its tools with `toolset=<the entry point's name>`; context-taking tools get the
worker's `Workbench`. Plug-ins are imported only by workers whose profile names them.
The names live in the board domain so `kanban add` checks them without loading any tool.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

from kanban.state.config import Config
from kanban.state.errors import ConfigError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from kanban.tools.registry import ToolRegistry

ENTRY_POINT_GROUP = "kanban.toolsets"
BUILTIN = ("kanban", "file", "terminal", "web")
LEAD_ONLY = "delegate"  # the lead's own toolset; never a worker's
ALWAYS = "kanban"  # every worker has it
# Granted by a card's or profile's role, never by name (issue 19).
REVIEW, ORCHESTRATOR, TRIAGE = "review", "orchestrator", "triage"
BY_ROLE = (REVIEW, ORCHESTRATOR, TRIAGE)


def for_role(card_role: str, profile_role: str) -> list[str]:
    """The board toolsets a card's role grants: a reviewer card's verdict tools, a
    decomposer card's `kanban_decompose`, an orchestrator profile's list and unblock."""
    granted = {"reviewer": [REVIEW], "decomposer": [TRIAGE]}.get(card_role, [])
    return granted + ([ORCHESTRATOR] if profile_role == "orchestrator" else [])


@cache
def plugins() -> dict[str, EntryPoint]:
    """Installed plug-in toolsets by name (their code is not imported here)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)
            if ep.name not in BUILTIN and ep.name != LEAD_ONLY and ep.name not in BY_ROLE
            and not ep.name.startswith("mcp:")}


def known(config: Config) -> list[str]:
    """Every toolset a worker could be given under `config`."""
    return [*BUILTIN, *(f"mcp:{name}" for name in sorted(config.mcp)), *sorted(plugins())]


def unknown_in(names: Iterable[str], config: Config) -> list[str]:
    cheap = set(BUILTIN) | {f"mcp:{name}" for name in config.mcp}
    left = [n for n in names if n not in cheap]
    return [n for n in left if n not in plugins()] if left else []  # entry points cost a scan


def check(names: Iterable[str], config: Config, where: str) -> None:
    """Refuse unknown toolsets (and the lead's `delegate`) in one clear line."""
    names = list(names)
    if LEAD_ONLY in names:
        raise ConfigError(f"{where}: toolset 'delegate' is the lead's own (`kanban run`); a "
                          "worker is never given it")
    by_role = [n for n in names if n in BY_ROLE]
    if by_role:
        raise ConfigError(f"{where}: toolset {by_role[0]!r} is granted by a role (a reviewer "
                          "card, a decomposer card, an orchestrator profile), not by name")
    unknown = unknown_in(names, config)
    if unknown:
        raise ConfigError(f"{where}: unknown toolset(s) {', '.join(map(repr, unknown))} "
                          f"(known: {', '.join(known(config))})")


def check_config(config: Config) -> None:
    """Every profile's toolsets exist."""
    for profile in config.profiles.values():
        check(profile.toolsets, config, f"profile {profile.name!r}")


def parse_list(text: str | None) -> tuple[str, ...] | None:
    """`kanban,file` as given on a command line (None: not given)."""
    if text is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    return names


def load_plugin(name: str, registry: ToolRegistry) -> None:
    """Import plug-in `name` and let it register its tools (once per registry)."""
    if name in registry.toolsets():
        return
    entry = plugins().get(name)
    if entry is None:
        raise ConfigError(f"unknown toolset {name!r}")
    try:
        register = entry.load()
        register(registry)
    except Exception as exc:
        raise ConfigError(f"toolset {name!r} ({entry.value}) failed to load: "
                          f"{type(exc).__name__}: {exc}") from None
    if name not in registry.toolsets():
        raise ConfigError(f"toolset {name!r} ({entry.value}) registered no tools under its name")
