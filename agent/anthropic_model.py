"""Anthropic Messages adapter, with prompt-caching markers on the stable prefix."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anthropic

from agent.errors import ModelError
from agent.retry import Failure, RetryPolicy, call_with_retries, status_failure
from agent.types import Message, ModelResponse, ToolCall, ToolSpec, Usage

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
CACHE_MARKER = {"type": "ephemeral"}


class AnthropicModel:
    """A `Model` over `client.messages.create`; the SDK's own retries are off."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 120,
        retry: RetryPolicy | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        self.model = model
        self.name = f"{PROVIDER}:{model}"
        self._retry = retry or RetryPolicy()
        self._max_tokens = max_tokens
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
        )

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        request = build_request(self.model, messages, tools, self._max_tokens)
        try:
            reply = call_with_retries(
                lambda: self._client.messages.create(**request),
                translate_error,
                self._retry,
                provider=PROVIDER,
                model=self.model,
            )
        except anthropic.AnthropicError as exc:
            raise ModelError(f"{PROVIDER}: {type(exc).__name__}: {exc}") from exc
        return parse_message(reply, self.model)

    def close(self) -> None:
        self._client.close()


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


def parse_message(reply: Any, model: str) -> ModelResponse:
    texts = [block.text for block in reply.content if block.type == "text"]
    calls = tuple(
        ToolCall(id=block.id, name=block.name, arguments=arguments_of(block.input))
        for block in reply.content
        if block.type == "tool_use"
    )
    return ModelResponse(
        text="".join(texts) if texts else None,
        tool_calls=calls,
        usage=parse_usage(reply.usage),
        stop_reason=reply.stop_reason or "end_turn",
        model=reply.model or model,
    )


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


def translate_error(exc: Exception) -> Failure | None:
    """The neutral form of an SDK error, or None when it is not an API failure."""
    if isinstance(exc, anthropic.APIStatusError):
        return status_failure(exc.status_code, exc.response.headers, exc.body, exc.message)
    if isinstance(exc, anthropic.APITimeoutError):
        return Failure("request timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        return Failure(f"connection error: {exc.__cause__ or exc}")
    return None
