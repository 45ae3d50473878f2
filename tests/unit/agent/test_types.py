"""Messages round-trip through JSON; usage adds up."""

from __future__ import annotations

import json

import pytest

from kanban.agent import Message, ReasoningData, ToolCall, Usage


@pytest.mark.parametrize(
    "message",
    [
        Message("system", "be brief"),
        Message("user", "hello"),
        Message("assistant", None, tool_calls=(ToolCall("c1", "echo", '{"text": "x"}'),)),
        Message("assistant", "text and a call", tool_calls=(ToolCall("c2", "add", "{broken"),)),
        Message("tool", "result", tool_call_id="c1", name="echo"),
        Message("tool", "no such tool", tool_call_id="c2", name="add", is_error=True),
        Message("assistant", "thought", reasoning="because", model="anthropic:claude",
                reasoning_data=ReasoningData("anthropic", ({"type": "thinking",
                                                            "thinking": "because",
                                                            "signature": "s"},))),
    ],
)
def test_message_round_trips_through_json(message: Message) -> None:
    stored = json.loads(json.dumps(message.to_dict()))
    assert Message.from_dict(stored) == message


def test_message_dict_is_compact() -> None:
    assert Message("user", "hi").to_dict() == {"role": "user", "content": "hi"}


def test_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown message role"):
        Message("robot", "beep")  # type: ignore[arg-type]


def test_usage_adds_up() -> None:
    total = Usage(10, 2, 4) + Usage(5, 1, 0)
    assert total == Usage(15, 3, 4)
    assert total.total_tokens == 18
    assert sum([Usage(1, 1), Usage(2, 2)], Usage()) == Usage(3, 3)
    assert total.to_dict() == {"input_tokens": 15, "output_tokens": 3, "cached_tokens": 4}
