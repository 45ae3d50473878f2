"""Tools for agents: the registry and the toolboxes it hands out."""

from __future__ import annotations

from kanban.agent.types import ToolResult
from kanban.tools.registry import Tool, Toolbox, ToolDefinitionError, ToolRegistry
from kanban.tools.schema import validate

__all__ = ["Tool", "ToolDefinitionError", "ToolRegistry", "ToolResult", "Toolbox", "validate"]
