"""Tools for agents: the registry and the toolboxes it hands out.

The names are loaded on first use, so that a light module of this package (the command
runner, the sandbox check that `kanban status` makes) does not import the agent runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kanban.agent.types import ToolResult
    from kanban.tools.registry import Tool, Toolbox, ToolDefinitionError, ToolRegistry
    from kanban.tools.schema import validate

_WHERE = {"ToolResult": "kanban.agent.types", "Tool": "kanban.tools.registry",
          "Toolbox": "kanban.tools.registry", "ToolDefinitionError": "kanban.tools.registry",
          "ToolRegistry": "kanban.tools.registry", "validate": "kanban.tools.schema"}

__all__ = ["Tool", "ToolDefinitionError", "ToolRegistry", "ToolResult", "Toolbox", "validate"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
