"""How the adapters map neutral messages and tools onto each provider's request shape."""

from __future__ import annotations

from kanban.agent import (
    Message,
    ReasoningData,
    ToolCall,
    ToolSpec,
    anthropic_model,
    openai_model,
    openai_responses,
)

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


THOUGHTFUL = [
    Message("system", "be brief"),
    Message("user", "hi"),
    Message("assistant", "calling", tool_calls=(ToolCall("c1", "echo", '{"text": "x"}'),),
            reasoning="I should echo",
            reasoning_data=ReasoningData("anthropic", ({"type": "thinking",
                                                        "thinking": "I should echo",
                                                        "signature": "sig"},))),
    Message("tool", "x", tool_call_id="c1", name="echo"),
    Message("assistant", "more", reasoning="hidden",
            reasoning_data=ReasoningData("openai-responses", (
                {"type": "reasoning", "id": "rs_1", "summary": [],
                 "encrypted_content": "opaque"},
                {"type": "reasoning", "id": "rs_2", "summary": []}))),
    Message("tool", "boom", tool_call_id="c9", name="echo", is_error=True),
]


def test_responses_request_shape() -> None:
    request = openai_responses.build_request("gpt-5", THOUGHTFUL, SPECS, 500, "medium")
    assert request["instructions"] == "be brief" and request["store"] is False
    assert request["max_output_tokens"] == 500
    assert request["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert request["tools"][0] == {"type": "function", "name": "echo",
                                   "description": "echo text",
                                   "parameters": SPECS[0].parameters, "strict": False}
    items = request["input"]
    assert items[0] == {"role": "user", "content": "hi"}
    assert items[1] == {"role": "assistant", "content": "calling"}  # no Anthropic thinking
    assert items[2] == {"type": "function_call", "call_id": "c1", "name": "echo",
                        "arguments": '{"text": "x"}'}
    assert items[3] == {"type": "function_call_output", "call_id": "c1", "output": "x"}
    # only encrypted reasoning goes back (nothing is stored on the server)
    assert items[4] == {"type": "reasoning", "id": "rs_1", "summary": [],
                        "encrypted_content": "opaque"}
    assert items[5] == {"role": "assistant", "content": "more"}
    assert items[6]["output"] == "Error: boom"


def test_thinking_goes_back_to_anthropic_only() -> None:
    anthropic = anthropic_model.build_request("claude", THOUGHTFUL, SPECS, 100)
    first = anthropic["messages"][1]["content"]
    assert first[0] == {"type": "thinking", "thinking": "I should echo", "signature": "sig"}
    assert [b["type"] for b in anthropic["messages"][3]["content"]] == ["text"]
    chat = openai_model.build_request("gpt", THOUGHTFUL, SPECS, None)
    assert all("reasoning" not in m and "thinking" not in str(m) for m in chat["messages"])
