"""The project's tool registry with every built-in toolset registered."""

from __future__ import annotations

from tools import delegate, kanban_tools
from tools.registry import ToolRegistry

REGISTRY = ToolRegistry()
kanban_tools.register(REGISTRY)
delegate.register(REGISTRY)
