"""A plug-in toolset: `greet(name)` answers from the worker's workspace."""

from __future__ import annotations

from typing import Any


def greet(arguments: dict[str, Any], bench: Any) -> str:
    return f"hello, {arguments['name']}, from {bench.workspace}"


def register(registry: Any) -> None:
    registry.tool("greet", description="Greet someone.", toolset="greeting", takes_context=True,
                  parameters={"type": "object", "properties": {"name": {"type": "string"}},
                              "required": ["name"]})(greet)
