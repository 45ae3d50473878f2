"""The project's tool registry with every built-in toolset registered.

Importing it loads only the tools' own modules (standard library); the HTML parser, the
MCP SDK and plug-ins load when a worker first needs them.
"""

from __future__ import annotations

from kanban.tools import (
    delegate,
    files,
    kanban_tools,
    orchestrator_tools,
    review_tools,
    skill_tools,
    terminal,
    triage_tools,
    web,
)
from kanban.tools.registry import ToolRegistry

REGISTRY = ToolRegistry()
kanban_tools.register(REGISTRY)
files.register(REGISTRY)
terminal.register(REGISTRY)
web.register(REGISTRY)
delegate.register(REGISTRY)
skill_tools.register(REGISTRY)
review_tools.register(REGISTRY)
orchestrator_tools.register(REGISTRY)
triage_tools.register(REGISTRY)
