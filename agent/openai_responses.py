"""OpenAI Responses adapter (`openai-responses:MODEL`), streaming, with reasoning items.

The conversation is sent whole each call (no server-side state): system text goes in
`instructions`, tool calls and results as `function_call` / `function_call_output` items,
and the reasoning items a Responses model returned go back with the turn they belong to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import openai

from kanban.agent.errors import ModelError
from kanban.agent.keys import KeyRing
from kanban.agent.openai_model import (
    DEFAULT_BASE_URL,
    make_client,
    stream_failure,
    translate_error,
)
from kanban.agent.retry import (
    RetryPolicy,
    at_endpoint,
    call_with_retries,
    endpoint_label,
)
from kanban.agent.streaming import ReplyBuilder, ignore
from kanban.agent.types import Message, ModelResponse, OnEvent, StreamRestart, ToolSpec, Usage

PROVIDER = "openai-responses"
WIRE = "openai-responses"
__all__ = ["DEFAULT_BASE_URL", "ResponsesModel", "build_request"]


class StreamError(Exception):
    """A `response.failed` or `error` event."""

    def __init__(self, body: object, message: str) -> None:
        super().__init__(message)
        self.body = body
        self.message = message


class ResponsesModel:
    """A `Model` over streamed `client.responses.create`; the SDK's retries are off."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | Sequence[str],
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 120,
        retry: RetryPolicy | None = None,
        max_tokens: int | None = None,
        reasoning: str | None = None,
        transport: Any = None,  # the HTTP library's transport; None: the network
    ) -> None:
        self.model = model
        self.name = f"{PROVIDER}:{model}"
        self._retry = retry or RetryPolicy()
        self._max_tokens = max_tokens
        self._reasoning = reasoning
        self._keys = KeyRing([api_key] if isinstance(api_key, str) else api_key,
                             lambda key: make_client(key, base_url, timeout, transport))
        self.endpoint = endpoint_label(base_url or DEFAULT_BASE_URL)

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        return self.stream(messages, tools, ignore)

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
               on_event: OnEvent) -> ModelResponse:
        request = build_request(self.model, messages, tools, self._max_tokens, self._reasoning)
        request["stream"] = True

        def attempt() -> ModelResponse:
            with self._keys.client.responses.create(**request) as events:
                return read_stream(events, ReplyBuilder(on_event), self.model)

        self._keys.begin()
        try:
            response = call_with_retries(
                attempt, translate, self._retry, provider=PROVIDER, model=self.model,
                rotate_key=self._keys.rotate, endpoint=self.endpoint,
                on_retry=lambda failure: on_event(StreamRestart(failure.describe())),
            )
        except openai.OpenAIError as exc:
            raise at_endpoint(ModelError(f"{PROVIDER}: {type(exc).__name__}: {exc}"),
                              self.endpoint) from exc
        return replace(response, source=self.name)

    def close(self) -> None:
        self._keys.close()


def translate(exc: Exception) -> Any:
    if isinstance(exc, StreamError):
        return stream_failure(exc.body, exc.message)
    return translate_error(exc)


def build_request(model: str, messages: Sequence[Message], tools: Sequence[ToolSpec],
                  max_tokens: int | None, reasoning: str | None = None) -> dict[str, Any]:
    """Keyword arguments for `responses.create` (without `stream`)."""
    request: dict[str, Any] = {"model": model, "input": conversation_to_wire(messages),
                               "store": False}
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    if system:
        request["instructions"] = system
    if tools:
        request["tools"] = [tool_to_wire(spec) for spec in tools]
    if max_tokens is not None:
        request["max_output_tokens"] = max_tokens
    if reasoning:
        request["reasoning"] = {"effort": reasoning, "summary": "auto"}
        request["include"] = ["reasoning.encrypted_content"]
    return request


def conversation_to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            output = message.content or ""
            items.append({"type": "function_call_output", "call_id": message.tool_call_id or "",
                          "output": f"Error: {output}" if message.is_error else output})
            continue
        if message.role == "assistant":
            data = message.reasoning_data
            if data is not None and data.wire == WIRE:
                # Nothing is stored server-side: only encrypted reasoning can be sent back.
                items.extend(dict(b) for b in data.blocks if b.get("encrypted_content"))
        if message.content or message.role == "user":
            items.append({"role": message.role, "content": message.content or ""})
        for call in message.tool_calls:
            items.append({"type": "function_call", "call_id": call.id, "name": call.name,
                          "arguments": call.arguments})
    return items


def tool_to_wire(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "name": spec.name, "description": spec.description,
            "parameters": spec.parameters, "strict": False}


def read_stream(events: Any, reply: ReplyBuilder, model: str) -> ModelResponse:
    """Fold Responses stream events into one response; the final `response.completed`
    event is the record, the deltas before it feed the listener."""
    final: Any = None
    for event in events:
        kind = getattr(event, "type", "")
        if kind == "response.output_text.delta":
            reply.text(event.delta)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            reply.reasoning(event.delta)
        elif kind == "response.output_item.added" and event.item.type == "function_call":
            reply.call(event.output_index, id=event.item.call_id, name=event.item.name)
        elif kind == "response.function_call_arguments.delta":
            reply.call(event.output_index, arguments=event.delta)
        elif kind in ("response.completed", "response.incomplete"):
            final = event.response
        elif kind == "response.failed":
            error = getattr(event.response, "error", None)
            raise StreamError(_as_dict(error), getattr(error, "message", "") or "response failed")
        elif kind == "error":
            raise StreamError({"code": getattr(event, "code", None),
                               "message": getattr(event, "message", "")},
                              getattr(event, "message", "") or "stream error")
    if final is None:
        raise ModelError(f"{PROVIDER}: the stream of model {model!r} ended without a response")
    return parse_response(final, model)


def parse_response(response: Any, model: str) -> ModelResponse:
    """The record of a finished response: its output items in order."""
    reply = ReplyBuilder()
    for index, item in enumerate(response.output or ()):
        if item.type == "message":
            for part in item.content or ():
                if part.type == "output_text":
                    reply.text(part.text)
        elif item.type == "function_call":
            reply.call(index, id=item.call_id, name=item.name, arguments=item.arguments or "")
        elif item.type == "reasoning":
            texts = [s.text for s in item.summary or ()] or [
                c.text for c in getattr(item, "content", None) or ()]
            reply.reasoning("\n".join(t for t in texts if t))
            reply.reasoning_blocks.append(reasoning_item(item))
    incomplete = getattr(response, "incomplete_details", None)
    stop = "tool_calls" if any(i.type == "function_call" for i in response.output or ()) \
        else (getattr(incomplete, "reason", None) or "stop")
    return reply.response(usage=parse_usage(response.usage), stop_reason=stop,
                          model=response.model or model, reasoning_wire=WIRE)


def reasoning_item(item: Any) -> dict[str, Any]:
    """What the API accepts back: the id, the summary and any encrypted content."""
    block: dict[str, Any] = {
        "type": "reasoning", "id": item.id,
        "summary": [{"type": "summary_text", "text": s.text} for s in item.summary or ()],
    }
    if getattr(item, "encrypted_content", None):
        block["encrypted_content"] = item.encrypted_content
    return block


def parse_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "input_tokens_details", None)
    return Usage(input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
                 cached_tokens=(getattr(details, "cached_tokens", None) or 0) if details else 0)


def _as_dict(error: Any) -> dict[str, Any]:
    if error is None:
        return {}
    return {"code": getattr(error, "code", None), "message": getattr(error, "message", "")}
