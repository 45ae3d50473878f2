"""The tool registry, the toolboxes handed to agents, and a small JSON-Schema validator.

A `Toolbox` answers every tool call with a `ToolResult`: bad JSON, unknown or unavailable
tools, schema violations and handler exceptions all become error results for the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.types import ToolCall, ToolResult, ToolSpec
from state.errors import KanbanError

Handler = Callable[..., "str | ToolResult"]
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolDefinitionError(KanbanError):
    """A tool, toolset or toolbox was defined wrongly (a programming error, raised early)."""


@dataclass(frozen=True)
class Tool:
    """A callable tool: `handler(arguments)`, or `handler(arguments, context)` if it takes one."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    toolset: str
    takes_context: bool = False

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
        return ToolSpec(self.name, self.description, self.parameters)


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
    ) -> Callable[[Handler], Handler]:
        """Decorator form of `register`."""

        def decorate(handler: Handler) -> Handler:
            params = parameters if parameters is not None else {"type": "object", "properties": {}}
            self.register(Tool(name, description, params, handler, toolset, takes_context))
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
        self, toolsets: Iterable[str], context: Any = None, *, exclude: Iterable[str] = ()
    ) -> Toolbox:
        """The tools of `toolsets` minus `exclude`, bound to `context`."""
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
        return Toolbox(chosen, context, known=self._tools.keys())


class Toolbox:
    """The explicit set of tools one agent has; `call` never raises."""

    def __init__(
        self, tools: Iterable[Tool], context: Any = None, *, known: Iterable[str] = ()
    ) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._known = frozenset(known) | self._tools.keys()
        self.context = context
        needy = [tool.name for tool in self._tools.values() if tool.takes_context]
        if needy and context is None:
            raise ToolDefinitionError(f"tools {', '.join(needy)} need a context")

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
        try:
            if tool.takes_context:
                outcome = tool.handler(arguments, self.context)
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
        return f"expected a JSON object, got {_json_type(value)}"
    return value


# --- a validator for the JSON-Schema subset tools use -----------------------------------

JSON_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


def validate(value: Any, schema: dict[str, Any], path: str = "") -> str | None:
    """The first way `value` breaks `schema` (type, enum, bounds, properties, items), or None."""
    checks: Sequence[Callable[[Any, dict[str, Any], str], str | None]] = (
        _check_type,
        _check_enum,
        _check_length,
        _check_range,
        _check_object,
        _check_array,
    )
    for check in checks:
        problem = check(value, schema, path)
        if problem:
            return problem
    return None


def _check_type(value: Any, schema: dict[str, Any], path: str) -> str | None:
    expected = schema.get("type")
    if expected is None:
        return None
    allowed = [expected] if isinstance(expected, str) else list(expected)
    if any(_is_type(value, kind) for kind in allowed):
        return None
    return f"{_field(path)} must be of type {' or '.join(allowed)}, got {_json_type(value)}"


def _check_enum(value: Any, schema: dict[str, Any], path: str) -> str | None:
    options = schema.get("enum")
    if options is None or value in options:
        return None
    return f"{_field(path)} must be one of: {', '.join(json.dumps(o) for o in options)}"


def _check_length(value: Any, schema: dict[str, Any], path: str) -> str | None:
    if not isinstance(value, str):
        return None
    if "minLength" in schema and len(value) < schema["minLength"]:
        return f"{_field(path)} must be at least {schema['minLength']} characters long"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"{_field(path)} must be at most {schema['maxLength']} characters long"
    return None


def _check_range(value: Any, schema: dict[str, Any], path: str) -> str | None:
    if not _is_type(value, "number"):
        return None
    if "minimum" in schema and value < schema["minimum"]:
        return f"{_field(path)} must be >= {schema['minimum']}"
    if "maximum" in schema and value > schema["maximum"]:
        return f"{_field(path)} must be <= {schema['maximum']}"
    return None


def _check_object(value: Any, schema: dict[str, Any], path: str) -> str | None:
    if not isinstance(value, dict):
        return None
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            return f"{_field(_join(path, name))} is required"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            problem = validate(item, properties[name], _join(path, name))
        elif extra is False:
            problem = f"{_field(_join(path, name))} is not allowed"
        elif isinstance(extra, dict):
            problem = validate(item, extra, _join(path, name))
        else:
            problem = None
        if problem:
            return problem
    return None


def _check_array(value: Any, schema: dict[str, Any], path: str) -> str | None:
    items = schema.get("items")
    if not isinstance(value, list) or not isinstance(items, dict):
        return None
    for index, item in enumerate(value):
        problem = validate(item, items, f"{path}[{index}]")
        if problem:
            return problem
    return None


def check_schema(schema: Any, path: str) -> str | None:
    """Why `schema` is not a schema this validator understands, or None."""
    if not isinstance(schema, dict):
        return f"{path} must be a JSON schema object"
    kinds = schema.get("type", [])
    for kind in [kinds] if isinstance(kinds, str) else kinds:
        if kind not in JSON_TYPES:
            return f"{path}: unknown type {kind!r}"
    if not isinstance(schema.get("required", []), list):
        return f"{path}: 'required' must be a list"
    if "enum" in schema and not isinstance(schema["enum"], list):
        return f"{path}: 'enum' must be a list"
    nested = [(f"{path}.{name}", sub) for name, sub in schema.get("properties", {}).items()]
    nested += [(f"{path}[]", schema["items"])] if "items" in schema else []
    if isinstance(schema.get("additionalProperties"), dict):
        nested.append((f"{path}.*", schema["additionalProperties"]))
    for where, sub in nested:
        problem = check_schema(sub, where)
        if problem:
            return problem
    return None


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return _is_number(value) and float(value).is_integer()
    if kind == "number":
        return _is_number(value)
    return _json_type(value) == kind


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}
    names |= {dict: "object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _field(path: str) -> str:
    return f"field '{path}'" if path else "the arguments"
