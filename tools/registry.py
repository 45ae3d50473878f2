"""The tool registry and the toolboxes handed to agents.

A `Toolbox` answers every tool call with a `ToolResult`: bad JSON, unknown or unavailable
tools, schema violations and handler exceptions all become error results for the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kanban.agent.types import ToolCall, ToolResult, ToolSpec
from kanban.state.errors import KanbanError
from kanban.tools.schema import check_schema, json_type, validate

Handler = Callable[..., "str | ToolResult"]
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolDefinitionError(KanbanError):
    """A tool, toolset or toolbox was defined wrongly (a programming error, raised early)."""


@dataclass(frozen=True)
class Tool:
    """A callable tool: `handler(arguments)`, or `handler(arguments, context)` if it takes one.

    `parallel`: calls may run at the same time as other calls of the same turn (the handler
    is thread-safe and independent of them). `exclusive`: the call runs alone, after every
    other call of its turn (tools that end the run, like finishing a card).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    toolset: str
    takes_context: bool = False
    parallel: bool = True
    exclusive: bool = False

    def __post_init__(self) -> None:
        if not TOOL_NAME.match(self.name):
            raise ToolDefinitionError(f"tool name {self.name!r} must match {TOOL_NAME.pattern}")
        if not self.description.strip():
            raise ToolDefinitionError(f"tool {self.name} needs a description")
        if self.parameters.get("type") != "object":
            raise ToolDefinitionError(f"tool {self.name}: parameters must be an object schema")
        problem = check_schema(self.parameters, "parameters")
        if problem:
            raise ToolDefinitionError(f"tool {self.name}: {problem}")

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters,
                        parallel=self.parallel and not self.exclusive, exclusive=self.exclusive)


class ToolRegistry:
    """Every known tool by name, grouped in toolsets."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ToolDefinitionError(f"tool {tool.name} is already registered")
        self._tools[tool.name] = tool
        return tool

    def tool(
        self,
        name: str,
        *,
        description: str,
        toolset: str,
        parameters: dict[str, Any] | None = None,
        takes_context: bool = False,
        parallel: bool = True,
        exclusive: bool = False,
    ) -> Callable[[Handler], Handler]:
        """Decorator form of `register`."""

        def decorate(handler: Handler) -> Handler:
            params = parameters if parameters is not None else {"type": "object", "properties": {}}
            self.register(Tool(name, description, params, handler, toolset, takes_context,
                               parallel=parallel, exclusive=exclusive))
            return handler

        return decorate

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise ToolDefinitionError(f"unknown tool {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self, toolset: str) -> list[str]:
        """Tool names of `toolset`, in registration order."""
        return [tool.name for tool in self._tools.values() if tool.toolset == toolset]

    def toolsets(self) -> list[str]:
        return sorted({tool.toolset for tool in self._tools.values()})

    def toolbox(
        self,
        toolsets: Iterable[str],
        context: Any = None,
        *,
        exclude: Iterable[str] = (),
        contexts: Mapping[str, Any] | None = None,
        extra: Iterable[Tool] = (),
    ) -> Toolbox:
        """The tools of `toolsets` minus `exclude`, plus `extra` tools made elsewhere (MCP);
        each bound to its toolset's entry in `contexts`, else to `context`."""
        wanted = list(toolsets)
        unknown = sorted(set(wanted) - set(self.toolsets()))
        if unknown:
            raise ToolDefinitionError(f"unknown toolset(s): {', '.join(unknown)}")
        excluded = set(exclude)
        chosen = [
            tool
            for tool in self._tools.values()
            if tool.toolset in wanted and tool.name not in excluded
        ]
        return Toolbox([*chosen, *extra], context, known=self._tools.keys(), contexts=contexts)


class Toolbox:
    """The explicit set of tools one agent has; `call` never raises."""

    def __init__(
        self,
        tools: Iterable[Tool],
        context: Any = None,
        *,
        known: Iterable[str] = (),
        contexts: Mapping[str, Any] | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ToolDefinitionError(f"two tools are named {tool.name}")
            self._tools[tool.name] = tool
        self._known = frozenset(known) | self._tools.keys()
        self.context = context
        self._contexts = dict(contexts or {})
        needy = [tool.name for tool in self._tools.values()
                 if tool.takes_context and self.context_of(tool) is None]
        if needy:
            raise ToolDefinitionError(f"tools {', '.join(needy)} need a context")

    def context_of(self, tool: Tool) -> Any:
        return self._contexts.get(tool.toolset, self.context)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self._tools.values()]

    def call(self, tool_call: ToolCall) -> ToolResult:
        tool = self._tools.get(tool_call.name)
        if tool is None:
            return _error(self._unavailable(tool_call.name))
        arguments = parse_arguments(tool_call.arguments)
        if isinstance(arguments, str):
            return _error(f"invalid arguments for tool {tool.name}: {arguments}")
        problem = validate(arguments, tool.parameters)
        if problem:
            return _error(f"invalid arguments for tool {tool.name}: {problem}")
        return self._invoke(tool, arguments)

    def _unavailable(self, name: str) -> str:
        if name in self._known:
            return f"tool {name} is not available to this agent"
        available = ", ".join(self._tools) or "none"
        return f"unknown tool {name!r}; available tools: {available}"

    def _invoke(self, tool: Tool, arguments: dict[str, Any]) -> ToolResult:
        outcome: Any  # a plugin handler may return anything: checked below
        try:
            if tool.takes_context:
                outcome = tool.handler(arguments, self.context_of(tool))
            else:
                outcome = tool.handler(arguments)
        except KanbanError as exc:
            return _error(exc.message)
        except Exception as exc:
            return _error(f"internal error in tool {tool.name}: {type(exc).__name__}: {exc}")
        if isinstance(outcome, str):
            return ToolResult(outcome)
        if isinstance(outcome, ToolResult):
            return outcome
        kind = type(outcome).__name__
        return _error(f"internal error in tool {tool.name}: handler returned {kind}")


def _error(message: str) -> ToolResult:
    return ToolResult(message, is_error=True)


def parse_arguments(raw: str) -> dict[str, Any] | str:
    """The arguments object, or a message saying why the text is not one."""
    if not raw.strip():
        return {}  # some models send "" for tools without parameters
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return f"not valid JSON ({exc}); send the arguments as one JSON object"
    if not isinstance(value, dict):
        return f"expected a JSON object, got {json_type(value)}"
    return value
