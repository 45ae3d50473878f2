"""Each model adapter run once on a canned answer, in the forkserver before it forks.

The SDKs import their resources, build their pydantic models and their streaming parsers
on first use (about 30 ms for a chat completion): done here once, not in every worker.
No network and no thread: the answer comes from the HTTP library's mock transport.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import kanban.agent.tls as tls
from kanban.agent.types import Message, ToolSpec

_TOOL = ToolSpec("warm_tool", "warms the tool paths", {
    "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]})


def _sse(events: Iterable[tuple[str | None, dict[str, Any] | str]]) -> bytes:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def _chat() -> bytes:
    base = {"id": "warm", "object": "chat.completion.chunk", "created": 0, "model": "warm"}
    call = {"index": 0, "id": "call_warm", "type": "function",
            "function": {"name": "warm_tool", "arguments": '{"x": "y"}'}}
    return _sse([
        (None, base | {"choices": [{"index": 0, "finish_reason": None, "delta": {
            "role": "assistant", "content": "ok", "tool_calls": [call]}}]}),
        (None, base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        (None, base | {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                 "total_tokens": 2}}),
        (None, "[DONE]"),
    ])


def _responses() -> bytes:
    message = {"type": "message", "id": "msg_warm", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "ok", "annotations": []}]}
    call = {"type": "function_call", "id": "fc_warm", "call_id": "call_warm",
            "name": "warm_tool", "arguments": '{"x": "y"}', "status": "completed"}
    usage = {"input_tokens": 1, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 2}

    def response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": "resp_warm", "object": "response", "created_at": 0, "status": status,
                "model": "warm", "output": output, "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": [], "usage": usage}

    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response("in_progress", [])}),
        ("response.output_item.added", {"output_index": 0, "item": message | {"content": []}}),
        ("response.output_text.delta", {"item_id": "msg_warm", "output_index": 0,
                                        "content_index": 0, "delta": "ok", "logprobs": []}),
        ("response.output_item.done", {"output_index": 0, "item": message}),
        ("response.output_item.added", {"output_index": 1, "item": call | {"arguments": ""}}),
        ("response.function_call_arguments.delta", {"item_id": "fc_warm", "output_index": 1,
                                                    "delta": '{"x": "y"}'}),
        ("response.output_item.done", {"output_index": 1, "item": call}),
        ("response.completed", {"response": response("completed", [message, call])}),
    ]
    return _sse((name, {"type": name, "sequence_number": i, **data})
                for i, (name, data) in enumerate(events))


def _anthropic() -> bytes:
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": {
            "id": "msg_warm", "type": "message", "role": "assistant", "model": "warm",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 0}}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        ("content_block_stop", {"index": 0}),
        ("content_block_start", {"index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_warm", "name": "warm_tool", "input": {}}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta",
                                                       "partial_json": '{"x": "y"}'}}),
        ("content_block_stop", {"index": 1}),
        ("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {}),
    ]
    return _sse((name, {"type": name, **data}) for name, data in events)


def _adapter(provider: str) -> tuple[Callable[..., Any], Callable[[], bytes]] | None:
    """The adapter class of `provider` and its canned answer; only its SDK is imported."""
    if provider == "openai":
        from kanban.agent.openai_model import OpenAIModel

        return OpenAIModel, _chat
    if provider == "openai-responses":
        from kanban.agent.openai_responses import ResponsesModel

        return ResponsesModel, _responses
    if provider == "anthropic":
        from kanban.agent.anthropic_model import AnthropicModel

        return AnthropicModel, _anthropic
    return None


def warm_up(providers: Iterable[str]) -> list[str]:
    """Run the adapters of `providers` once each on a canned answer; the ones that went
    through. A failure only leaves that adapter cold (its workers pay the first use)."""
    from kanban.agent.retry import RetryPolicy

    http = tls.http_library()
    warmed = []
    for provider in dict.fromkeys(providers):
        found = _adapter(provider)
        if found is None:
            continue
        adapter, body = found
        canned = body()
        transport = http.MockTransport(lambda request, canned=canned: http.Response(
            200, headers={"content-type": "text/event-stream"}, content=canned))
        model = adapter("warm", api_key="warm", base_url="http://warm.invalid/v1",
                        retry=RetryPolicy(max_retries=0), transport=transport)
        try:
            reply = model.complete([Message("user", "warm")], [_TOOL])
        except Exception:  # noqa: BLE001 - a cold adapter is slower, never broken
            continue
        finally:
            model.close()
        if reply.tool_calls and reply.text == "ok":
            warmed.append(provider)
    return warmed
