"""How the local LLM server renders a scripted `Reply` in each wire format.

`render` gives the one JSON body of a plain request (or the format's error body). For a
streamed request each `*_events` function gives the server-sent events the real API
would send, as `(event name or None, JSON payload)` pairs; `llm_server` writes them out,
pausing `reply.chunk_delay` seconds between events. A reply with `fail_after=n` breaks off
after n deltas with the format's in-stream error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.llm_server import LLMServer, Reply, ScriptedCall

Event = tuple[str | None, dict[str, Any]]
DONE = (None, {"__raw__": "[DONE]"})


def pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i:i + size] for i in range(0, len(text), size)] if text else []


def arguments(call: ScriptedCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _count_and_fail(reply: Reply, sent: list[int]) -> bool:
    """Count one piece; True when the reply should break off now."""
    sent[0] += 1
    return reply.fail_after is not None and sent[0] > reply.fail_after


# --- OpenAI Chat Completions -----------------------------------------------------------


def chat_events(server: LLMServer, reply: Reply, body: dict[str, Any],
                usage: tuple[int, int, int]) -> Iterator[Event]:
    base = {"id": server._next_id("chatcmpl"), "object": "chat.completion.chunk", "created": 0,
            "model": body.get("model", "unknown")}
    sent = [0]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        return None, base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for key, text in (("reasoning_content", reply.reasoning), ("content", reply.text)):
        for piece in pieces(text or "", reply.chunk_chars):
            if _count_and_fail(reply, sent):
                yield None, {"error": {"message": "The server had an error while streaming",
                                       "type": "server_error", "code": "server_error"}}
                return
            yield chunk({key: piece})
    for index, call in enumerate(reply.tool_calls):
        start = {"index": index, "id": server._next_id("call"), "type": "function",
                 "function": {"name": call.name, "arguments": ""}}
        yield chunk({"tool_calls": [start]})
        for piece in pieces(arguments(call), reply.chunk_chars):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt, completion, cached = usage
        yield None, base | {"choices": [], "usage": {
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}}
    yield DONE


# --- Anthropic Messages ----------------------------------------------------------------


def anthropic_events(server: LLMServer, reply: Reply, body: dict[str, Any],
                     usage: tuple[int, int, int]) -> Iterator[Event]:
    prompt, completion, cached = usage
    yield "message_start", {"type": "message_start", "message": {
        "id": server._next_id("msg"), "type": "message", "role": "assistant",
        "model": body.get("model", "unknown"), "content": [], "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt - cached, "output_tokens": 1,
                  "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}}}
    sent = [0]
    blocks: list[tuple[dict[str, Any], str, str, str]] = []
    if reply.reasoning:
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""},
                       "thinking_delta", "thinking", reply.reasoning))
    if reply.text:
        blocks.append(({"type": "text", "text": ""}, "text_delta", "text", reply.text))
    for call in reply.tool_calls:
        start = {"type": "tool_use", "id": server._next_id("toolu"), "name": call.name,
                 "input": {}}
        blocks.append((start, "input_json_delta", "partial_json", arguments(call)))
    for index, (start, delta_type, field, text) in enumerate(blocks):
        yield "content_block_start", {"type": "content_block_start", "index": index,
                                      "content_block": start}
        for piece in pieces(text, reply.chunk_chars):
            if _count_and_fail(reply, sent):
                yield "error", {"type": "error", "error": {"type": "overloaded_error",
                                                           "message": "Overloaded"}}
                return
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": delta_type, field: piece}}
        if start["type"] == "thinking":
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "signature_delta",
                                                    "signature": "sig-" + str(index)}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": "tool_use" if reply.tool_calls
                                      else "end_turn", "stop_sequence": None},
                            "usage": {"output_tokens": completion}}
    yield "message_stop", {"type": "message_stop"}


# --- OpenAI Responses ------------------------------------------------------------------


def responses_output(server: LLMServer, reply: Reply) -> list[dict[str, Any]]:
    """The output items of a finished response."""
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append({"type": "reasoning", "id": server._next_id("rs"),
                      "summary": [{"type": "summary_text", "text": reply.reasoning}],
                      "encrypted_content": "enc-" + str(len(items))})
    if reply.text is not None:
        items.append({"type": "message", "id": server._next_id("msg"), "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": reply.text,
                                   "annotations": []}]})
    for call in reply.tool_calls:
        items.append({"type": "function_call", "id": server._next_id("fc"),
                      "call_id": server._next_id("call"), "name": call.name,
                      "arguments": arguments(call), "status": "completed"})
    return items


def responses_body(server: LLMServer, reply: Reply, body: dict[str, Any],
                   usage: tuple[int, int, int], output: list[dict[str, Any]],
                   status: str = "completed") -> dict[str, Any]:
    prompt, completion, cached = usage
    return {
        "id": server._next_id("resp"), "object": "response", "created_at": 0,
        "status": status, "model": body.get("model", "unknown"), "output": output,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
        "incomplete_details": None, "instructions": body.get("instructions"), "metadata": {},
        "temperature": 1.0, "top_p": 1.0,
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                  "output_tokens": completion,
                  "output_tokens_details": {"reasoning_tokens": len(reply.reasoning or "") // 4},
                  "total_tokens": prompt + completion},
    }


def responses_events(server: LLMServer, reply: Reply, body: dict[str, Any],
                     usage: tuple[int, int, int]) -> Iterator[Event]:
    seq = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> Event:
        return kind, {"type": kind, "sequence_number": next(seq), **fields}

    output = responses_output(server, reply)
    yield event("response.created",
                response=responses_body(server, reply, body, usage, [], "in_progress"))
    sent = [0]
    for index, item in enumerate(output):
        opened = dict(item) | ({"arguments": ""} if item["type"] == "function_call" else {})
        if item["type"] == "message":
            opened["content"] = []
        elif item["type"] == "reasoning":
            opened["summary"] = []
        yield event("response.output_item.added", output_index=index, item=opened)
        for kind, text, extra in _item_deltas(item):
            for piece in pieces(text, reply.chunk_chars):
                if _count_and_fail(reply, sent):
                    yield event("error", code="server_error", param=None,
                                message="The server had an error while streaming")
                    return
                yield event(kind, item_id=item["id"], output_index=index, delta=piece, **extra)
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=responses_body(server, reply, body, usage, output))


def _item_deltas(item: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    if item["type"] == "reasoning":
        return [("response.reasoning_summary_text.delta", item["summary"][0]["text"],
                 {"summary_index": 0})]
    if item["type"] == "message":
        return [("response.output_text.delta", item["content"][0]["text"],
                 {"content_index": 0, "logprobs": []})]
    return [("response.function_call_arguments.delta", item["arguments"], {})]


EVENTS = {"openai": chat_events, "anthropic": anthropic_events, "responses": responses_events}


def encode(event: Event) -> bytes:
    name, payload = event
    data = payload["__raw__"] if "__raw__" in payload else json.dumps(payload)
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {data}\n\n".encode()


# --- plain (non-streamed) bodies ------------------------------------------------------


def render(
    server: LLMServer, route: str, reply: Reply, body: dict[str, Any], size: int
) -> tuple[int, dict[str, Any]]:
    if reply.status != 200:
        return reply.status, error_body(route, reply)
    usage = reply.usage or estimate_usage(reply, size)
    if route == "openai":
        return 200, openai_completion(server, reply, body, usage)
    if route == "responses":
        output = responses_output(server, reply)
        return 200, responses_body(server, reply, body, usage, output)
    return 200, anthropic_message(server, reply, body, usage)


def estimate_usage(reply: Reply, request_size: int) -> tuple[int, int, int]:
    produced = len(reply.text or "") + sum(len(arguments(c)) for c in reply.tool_calls)
    return request_size // 4, produced // 4 + 1, 0


def openai_completion(
    server: LLMServer, reply: Reply, body: dict[str, Any], usage: tuple[int, int, int]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        functions = [{"name": c.name, "arguments": arguments(c)} for c in reply.tool_calls]
        message["tool_calls"] = [
            {"id": server._next_id("call"), "type": "function", "function": function}
            for function in functions
        ]
    prompt, completion, cached = usage
    finish = "tool_calls" if reply.tool_calls else "stop"
    return {
        "id": server._next_id("chatcmpl"),
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "unknown"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def anthropic_message(
    server: LLMServer, reply: Reply, body: dict[str, Any], usage: tuple[int, int, int]
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": "sig"})
    if reply.text is not None:
        content.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:  # a str `arguments` plays a broken input
        block = {"type": "tool_use", "id": server._next_id("toolu"), "name": call.name}
        content.append(block | {"input": call.arguments})
    prompt, completion, cached = usage
    return {
        "id": server._next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "unknown"),
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt - cached,
            "output_tokens": completion,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        },
    }


ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                         403: "permission_error", 404: "not_found_error",
                         429: "rate_limit_error", 529: "overloaded_error"}


def error_body(route: str, reply: Reply) -> dict[str, Any]:
    if route in ("openai", "responses"):
        code = reply.error_code or ("model_not_found" if reply.status == 404 else None)
        error = {"message": reply.error_message, "type": "api_error", "param": None, "code": code}
        return {"error": error}
    kind = ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": reply.error_message}}
