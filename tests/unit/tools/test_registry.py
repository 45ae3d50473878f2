"""The tool registry and toolboxes: definitions, selection, and every error-result path."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kanban.agent import ToolCall, ToolResult, ToolSpec
from kanban.state.errors import KanbanError
from kanban.tools import Tool, Toolbox, ToolDefinitionError, ToolRegistry

COMMENT_SCHEMA = {
    "type": "object",
    "properties": {"body": {"type": "string", "minLength": 1}},
    "required": ["body"],
    "additionalProperties": False,
}


def comment(args: dict[str, Any]) -> str:
    return f"commented: {args['body']}"


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(Tool("comment", "Comment on a card", COMMENT_SCHEMA, comment, "kanban"))

    @registry.tool("show", description="Show a card", toolset="kanban")
    def show(args: dict[str, Any]) -> ToolResult:
        return ToolResult(json.dumps({"title": "t"}))

    @registry.tool("delegate", description="Create child cards", toolset="lead")
    def delegate(args: dict[str, Any]) -> str:
        return "delegated"

    return registry


def call(toolbox: Toolbox, name: str, arguments: str = "{}") -> ToolResult:
    return toolbox.call(ToolCall("c1", name, arguments))


# --- definitions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "bad name"}, "must match"),
        ({"name": ""}, "must match"),
        ({"description": "  "}, "needs a description"),
        ({"parameters": {"type": "string"}}, "must be an object schema"),
        ({"parameters": {"type": "object", "properties": {"x": {"type": "text"}}}},
         "unknown type 'text'"),
        ({"parameters": {"type": "object", "required": "x"}}, "'required' must be a list"),
        ({"parameters": {"type": "object", "properties": {"x": {"enum": "ab"}}}},
         "'enum' must be a list"),
        ({"parameters": {"type": "object", "properties": {"x": "string"}}},
         "parameters.x must be a JSON schema object"),
    ],
)
def test_bad_tool_definitions_are_refused(kwargs: dict[str, Any], message: str) -> None:
    fields = {"name": "ok", "description": "d", "parameters": {"type": "object"}} | kwargs
    with pytest.raises(ToolDefinitionError, match=message):
        Tool(handler=comment, toolset="t", **fields)


def test_duplicate_names_are_refused() -> None:
    registry = make_registry()
    with pytest.raises(ToolDefinitionError, match="already registered"):
        registry.register(Tool("comment", "again", {"type": "object"}, comment, "other"))


def test_registry_lookup_and_toolsets() -> None:
    registry = make_registry()
    assert registry.get("comment").toolset == "kanban"
    assert "show" in registry and "nope" not in registry
    assert registry.names("kanban") == ["comment", "show"]
    assert registry.names("lead") == ["delegate"]
    assert registry.toolsets() == ["kanban", "lead"]
    with pytest.raises(ToolDefinitionError, match="unknown tool 'nope'"):
        registry.get("nope")


def test_decorated_tools_default_to_no_arguments() -> None:
    assert make_registry().get("show").parameters == {"type": "object", "properties": {}}


def test_toolbox_holds_only_the_chosen_toolsets() -> None:
    toolbox = make_registry().toolbox(["kanban"])
    assert toolbox.names == ["comment", "show"]
    assert toolbox.specs() == [
        ToolSpec("comment", "Comment on a card", COMMENT_SCHEMA),
        ToolSpec("show", "Show a card", {"type": "object", "properties": {}}),
    ]


def test_toolbox_can_exclude_tools() -> None:
    toolbox = make_registry().toolbox(["kanban", "lead"], exclude=["delegate"])
    assert toolbox.names == ["comment", "show"]


def test_unknown_toolset_is_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="unknown toolset"):
        make_registry().toolbox(["kanban", "typo"])


def test_context_is_passed_to_tools_that_take_it() -> None:
    registry = ToolRegistry()

    @registry.tool("whoami", description="Own card", toolset="kanban", takes_context=True)
    def whoami(args: dict[str, Any], context: dict[str, str]) -> str:
        return context["card"]

    assert call(registry.toolbox(["kanban"], {"card": "c-7"}), "whoami").content == "c-7"
    with pytest.raises(ToolDefinitionError, match="need a context"):
        registry.toolbox(["kanban"])


# --- calls -----------------------------------------------------------------------------


def test_successful_calls() -> None:
    toolbox = make_registry().toolbox(["kanban"])
    assert call(toolbox, "comment", '{"body": "hi"}') == ToolResult("commented: hi")
    assert call(toolbox, "show", "") == ToolResult('{"title": "t"}')  # "" means no arguments


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("comment", "{not json", "invalid arguments for tool comment: not valid JSON"),
        ("comment", "[1, 2]", "expected a JSON object, got array"),
        ("comment", "{}", "field 'body' is required"),
        ("comment", '{"body": 3}', "field 'body' must be of type string, got integer"),
        ("comment", '{"body": ""}', "field 'body' must be at least 1 characters long"),
        ("comment", '{"body": "x", "card": 1}', "field 'card' is not allowed"),
        ("delegate", "{}", "tool delegate is not available to this agent"),
        ("rm_rf", "{}", "unknown tool 'rm_rf'; available tools: comment, show"),
    ],
)
def test_bad_calls_become_error_results(name: str, arguments: str, message: str) -> None:
    result = call(make_registry().toolbox(["kanban"]), name, arguments)
    assert result.is_error
    assert message in result.content


def test_handler_errors_become_error_results() -> None:
    def refuses(args: dict[str, Any]) -> str:
        raise KanbanError("card 7 is not yours")

    def crashes(args: dict[str, Any]) -> str:
        raise ValueError("boom")

    def returns_junk(args: dict[str, Any]) -> int:
        return 42

    toolbox = Toolbox(
        [
            Tool("refuses", "d", {"type": "object"}, refuses, "t"),
            Tool("crashes", "d", {"type": "object"}, crashes, "t"),
            Tool("junk", "d", {"type": "object"}, returns_junk, "t"),
        ]
    )
    assert call(toolbox, "refuses") == ToolResult("card 7 is not yours", is_error=True)
    assert call(toolbox, "crashes") == ToolResult(
        "internal error in tool crashes: ValueError: boom", is_error=True
    )
    assert call(toolbox, "junk") == ToolResult(
        "internal error in tool junk: handler returned int", is_error=True
    )


def test_a_handler_may_end_the_run() -> None:
    toolbox = Toolbox(
        [Tool("done", "d", {"type": "object"}, lambda a: ToolResult("ok", ends_run=True), "t")]
    )
    assert call(toolbox, "done").ends_run
