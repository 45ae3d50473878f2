"""Anthropic Messages adapter, with prompt-caching markers on the stable prefix."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anthropic

import kanban.agent.tls as tls
from kanban.agent.errors import ModelError
from kanban.agent.keys import KeyRing
from kanban.agent.openai_model import refused
from kanban.agent.retry import (
    Failure,
    RetryPolicy,
    at_endpoint,
    call_with_retries,
    endpoint_label,
    status_failure,
)
from kanban.agent.streaming import ReplyBuilder, ignore
from kanban.agent.types import (
    Message,
    ModelResponse,
    OnEvent,
    StreamRestart,
    ToolCall,
    ToolSpec,
    Usage,
)

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
CACHE_MARKER = {"type": "ephemeral"}
WIRE = "anthropic"
THINKING_BUDGETS = {"low": 2_048, "medium": 8_192, "high": 24_576}


class AnthropicModel:
    """A `Model` over streamed `client.messages.create`; the SDK's own retries are off.

    With `reasoning` set, extended thinking is on; thinking blocks (with their signatures)
    go back to the API with the turn they belong to.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | Sequence[str],
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 120,
        retry: RetryPolicy | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        reasoning: str | None = None,
        transport: Any = None,  # the HTTP library's transport; None: the network
    ) -> None:
        self.model = model
        self.name = f"{PROVIDER}:{model}"
        self._retry = retry or RetryPolicy()
        self._thinking = THINKING_BUDGETS.get(reasoning or "", 0)
        # The thinking budget is part of max_tokens: leave room for the answer too.
        self._max_tokens = (max(max_tokens, self._thinking + DEFAULT_MAX_TOKENS)
                            if self._thinking else max_tokens)
        self._keys = KeyRing([api_key] if isinstance(api_key, str) else api_key,
                             lambda key: make_client(key, base_url, timeout, transport))
        self.endpoint = endpoint_label(base_url or DEFAULT_BASE_URL)

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        return self.stream(messages, tools, ignore)

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
               on_event: OnEvent) -> ModelResponse:
        request = build_request(self.model, messages, tools, self._max_tokens)
        request["stream"] = True
        if self._thinking:
            request["thinking"] = {"type": "enabled", "budget_tokens": self._thinking}

        def attempt() -> ModelResponse:
            with self._keys.client.messages.create(**request) as events:
                return read_stream(events, ReplyBuilder(on_event), self.model)

        self._keys.begin()
        try:
            response = call_with_retries(
                attempt, translate_error, self._retry, provider=PROVIDER, model=self.model,
                rotate_key=self._keys.rotate, endpoint=self.endpoint,
                on_retry=lambda failure: on_event(StreamRestart(failure.describe())),
            )
        except anthropic.AnthropicError as exc:
            raise at_endpoint(ModelError(f"{PROVIDER}: {type(exc).__name__}: {exc}"),
                              self.endpoint) from exc
        return replace(response, source=self.name)

    def close(self) -> None:
        self._keys.close()


def make_client(key: str, base_url: str | None, timeout: float,
                transport: Any = None) -> anthropic.Anthropic:
    http = anthropic.DefaultHttpxClient(verify=tls.context(), transport=transport)
    return anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=0, timeout=timeout,
                               http_client=http)


def build_request(
    model: str, messages: Sequence[Message], tools: Sequence[ToolSpec], max_tokens: int
) -> dict[str, Any]:
    """Keyword arguments for `messages.create`: system apart, tools and system cache-marked."""
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": conversation_to_wire(messages),
    }
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    if system:
        request["system"] = [{"type": "text", "text": system, "cache_control": CACHE_MARKER}]
    if tools:
        wire_tools = [tool_to_wire(spec) for spec in tools]
        wire_tools[-1]["cache_control"] = CACHE_MARKER
        request["tools"] = wire_tools
    return request


def conversation_to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as alternating turns; tool results and user text that follow merge into one."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = blocks_of(message)
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    return wire


def blocks_of(message: Message) -> list[dict[str, Any]]:
    """A message's content blocks; thinking blocks only when Anthropic wrote them."""
    if message.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": message.content or "",
        }
        if message.is_error:
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = []
    data = message.reasoning_data
    if message.role == "assistant" and data is not None and data.wire == WIRE:
        blocks.extend(dict(block) for block in data.blocks)
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": input_of(call)}
        )
    return blocks or [{"type": "text", "text": "(empty)"}]


def input_of(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as an object; malformed ones were already answered with an error."""
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_to_wire(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


def read_stream(events: Any, reply: ReplyBuilder, model: str) -> ModelResponse:
    """Fold Messages stream events into one response, telling the listener as they come."""
    usage, stop, reported = Usage(), "end_turn", model
    thinking: dict[int, dict[str, Any]] = {}
    seen = False
    for event in events:
        kind = event.type
        seen = True
        if kind == "message_start":
            reported = event.message.model or reported
            usage = parse_usage(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                reply.call(event.index, id=block.id, name=block.name)
            elif block.type == "thinking":
                thinking[event.index] = {"type": "thinking", "thinking": block.thinking or "",
                                         "signature": getattr(block, "signature", "") or ""}
                reply.reasoning(block.thinking)
            elif block.type == "redacted_thinking":
                thinking[event.index] = {"type": "redacted_thinking", "data": block.data}
            elif block.type == "text":
                reply.text(block.text)
        elif kind == "content_block_delta":
            _delta(event.index, event.delta, reply, thinking)
        elif kind == "message_delta":
            stop = event.delta.stop_reason or stop
            if event.usage is not None and event.usage.output_tokens is not None:
                usage = Usage(usage.input_tokens, event.usage.output_tokens, usage.cached_tokens)
    if not seen:  # a 200 that was no event stream at all (a proxy's page, say)
        raise ModelError(f"{PROVIDER}: model {model!r} sent an empty stream")
    reply.reasoning_blocks.extend(thinking[i] for i in sorted(thinking))
    return reply.response(usage=usage, stop_reason=stop, model=reported, reasoning_wire=WIRE)


def _delta(index: int, delta: Any, reply: ReplyBuilder,
           thinking: dict[int, dict[str, Any]]) -> None:
    if delta.type == "text_delta":
        reply.text(delta.text)
    elif delta.type == "input_json_delta":
        reply.call(index, arguments=delta.partial_json)
    elif delta.type == "thinking_delta" and index in thinking:
        thinking[index]["thinking"] += delta.thinking
        reply.reasoning(delta.thinking)
    elif delta.type == "signature_delta" and index in thinking:
        thinking[index]["signature"] += delta.signature


def arguments_of(value: object) -> str:
    # The SDK hands `input` over as parsed JSON; anything but an object is passed on raw.
    return json.dumps(value) if isinstance(value, dict) else str(value)


def parse_usage(usage: Any) -> Usage:
    """Anthropic counts cache reads and writes apart from `input_tokens`; we sum them."""
    if usage is None:
        return Usage()
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    return Usage(
        input_tokens=(usage.input_tokens or 0) + cache_read + cache_write,
        output_tokens=usage.output_tokens or 0,
        cached_tokens=cache_read,
    )


# The status an error event in the middle of a stream stands for.
STREAM_ERROR_STATUS = {"overloaded_error": 529, "rate_limit_error": 429, "api_error": 500,
                       "invalid_request_error": 400, "request_too_large": 413}


def translate_error(exc: Exception) -> Failure | None:
    """The neutral form of an SDK error, or None when it is not an API failure."""
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status < 400:  # an `error` event inside a 200 stream: its type tells the status
            kind = _error_type(exc.body)
            status = STREAM_ERROR_STATUS.get(kind, 500)
        return status_failure(status, exc.response.headers, exc.body, exc.message)
    if isinstance(exc, anthropic.APITimeoutError):
        return Failure("request timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc
        return Failure(f"connection error: {cause}", refused=refused(cause))
    return None


def _error_type(body: object) -> str:
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            return str(inner.get("type") or "")
    return ""
