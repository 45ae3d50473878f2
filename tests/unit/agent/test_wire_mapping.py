"""How the adapters map neutral messages and tools onto each provider's request shape."""

from __future__ import annotations

from agent import Message, ToolCall, ToolSpec, anthropic_model, openai_model

SPECS = [
    ToolSpec("echo", "echo text", {"type": "object", "properties": {"text": {"type": "string"}}}),
    ToolSpec("add", "add numbers", {"type": "object"}),
]
CONVERSATION = [
    Message("system", "be brief"),
    Message("user", "hi"),
    Message(
        "assistant",
        "calling",
        tool_calls=(ToolCall("c1", "echo", '{"text": "x"}'), ToolCall("c2", "add", "{bad")),
    ),
    Message("tool", "x", tool_call_id="c1", name="echo"),
    Message("tool", "invalid arguments", tool_call_id="c2", name="add", is_error=True),
    Message("user", "please summarise"),
]


def test_openai_request_shape() -> None:
    request = openai_model.build_request("gpt-t", CONVERSATION, SPECS, None)
    assert request["model"] == "gpt-t"
    assert "max_completion_tokens" not in request
    assert request["messages"][0] == {"role": "system", "content": "be brief"}
    assistant = request["messages"][2]
    assert assistant["tool_calls"][1] == {
        "id": "c2",
        "type": "function",
        "function": {"name": "add", "arguments": "{bad"},
    }
    assert request["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "x"}
    assert request["messages"][4]["content"] == "Error: invalid arguments"
    assert request["tools"][0] == {
        "type": "function",
        "function": {"name": "echo", "description": "echo text", "parameters": SPECS[0].parameters},
    }


def test_openai_request_without_tools_omits_them() -> None:
    request = openai_model.build_request("m", [Message("user", "hi")], [], 256)
    assert "tools" not in request
    assert request["max_completion_tokens"] == 256


def test_anthropic_request_shape() -> None:
    request = anthropic_model.build_request("claude-t", CONVERSATION, SPECS, 1000)
    assert request["max_tokens"] == 1000
    assert request["system"] == [
        {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}
    ]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user"]
    assistant = request["messages"][1]["content"]
    assert assistant[0] == {"type": "text", "text": "calling"}
    assert assistant[1] == {"type": "tool_use", "id": "c1", "name": "echo", "input": {"text": "x"}}
    assert assistant[2]["input"] == {}  # malformed arguments cannot be sent back as an object
    results = request["messages"][2]["content"]
    assert results == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "x"},
        {
            "type": "tool_result",
            "tool_use_id": "c2",
            "content": "invalid arguments",
            "is_error": True,
        },
        {"type": "text", "text": "please summarise"},
    ]
    assert "cache_control" not in request["tools"][0]
    assert request["tools"][1] == {
        "name": "add",
        "description": "add numbers",
        "input_schema": {"type": "object"},
        "cache_control": {"type": "ephemeral"},
    }


def test_anthropic_request_without_system_or_tools() -> None:
    request = anthropic_model.build_request("m", [Message("user", "hi")], [], 10)
    assert "system" not in request and "tools" not in request


def test_anthropic_usage_counts_cache_reads_and_writes_as_input() -> None:
    class Raw:
        input_tokens = 10
        output_tokens = 5
        cache_read_input_tokens = 100
        cache_creation_input_tokens = 20

    usage = anthropic_model.parse_usage(Raw())
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (130, 5, 100)
