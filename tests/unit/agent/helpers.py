"""Helpers for agent unit tests: a fake clock and a quick way to make tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kanban.tools.registry import Tool


class FakeClock:
    """A monotonic clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_tool(name: str, handler: Callable[[dict[str, Any]], Any], **schema: Any) -> Tool:
    """A tool in toolset "test" whose parameters are an object schema built from `schema`."""
    parameters = {"type": "object", "properties": schema.pop("properties", {}), **schema}
    return Tool(name, f"the {name} tool", parameters, handler, toolset="test")
