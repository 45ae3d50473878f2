"""Tools for agents: the registry and the toolboxes it hands out."""

from __future__ import annotations

from agent.types import ToolResult
from tools.registry import Tool, Toolbox, ToolDefinitionError, ToolRegistry
from tools.schema import validate

__all__ = ["Tool", "ToolDefinitionError", "ToolRegistry", "ToolResult", "Toolbox", "validate"]
