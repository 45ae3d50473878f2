"""OpenAI Chat Completions adapter; works with any OpenAI-compatible server (vLLM, Ollama...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai

from agent.errors import ModelError
from agent.retry import Failure, RetryPolicy, call_with_retries, status_failure
from agent.types import Message, ModelResponse, ToolCall, ToolSpec, Usage

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIModel:
    """A `Model` over `client.chat.completions.create`; the SDK's own retries are off."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 120,
        retry: RetryPolicy | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.model = model
        self.name = f"{PROVIDER}:{model}"
        self._retry = retry or RetryPolicy()
        self._max_tokens = max_tokens
        self._client = openai.OpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
        )

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        request = build_request(self.model, messages, tools, self._max_tokens)
        try:
            completion = call_with_retries(
                lambda: self._client.chat.completions.create(**request),
                translate_error,
                self._retry,
                provider=PROVIDER,
                model=self.model,
            )
        except openai.OpenAIError as exc:
            raise ModelError(f"{PROVIDER}: {type(exc).__name__}: {exc}") from exc
        return parse_completion(completion, self.model)

    def close(self) -> None:
        self._client.close()


def build_request(
    model: str, messages: Sequence[Message], tools: Sequence[ToolSpec], max_tokens: int | None
) -> dict[str, Any]:
    """Keyword arguments for `chat.completions.create`."""
    request: dict[str, Any] = {
        "model": model,
        "messages": [message_to_wire(message) for message in messages],
    }
    if tools:
        request["tools"] = [tool_to_wire(spec) for spec in tools]
    if max_tokens is not None:
        request["max_completion_tokens"] = max_tokens
    return request


def message_to_wire(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        content = message.content or ""
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": f"Error: {content}" if message.is_error else content,
        }
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role != "assistant":
        wire["content"] = message.content or ""
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    return wire


def tool_to_wire(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


def parse_completion(completion: Any, model: str) -> ModelResponse:
    """A ModelResponse from a ChatCompletion, tolerant of sparse OpenAI-compatible servers."""
    if not completion.choices:
        raise ModelError(f"{PROVIDER}: model {model!r} returned no choices")
    choice = completion.choices[0]
    calls = tuple(
        ToolCall(
            id=call.id,
            name=call.function.name,
            arguments=call.function.arguments or "",
        )
        for call in choice.message.tool_calls or ()
        if getattr(call, "function", None) is not None
    )
    return ModelResponse(
        text=choice.message.content,
        tool_calls=calls,
        usage=parse_usage(completion.usage),
        stop_reason=choice.finish_reason or "stop",
        model=completion.model or model,
    )


def parse_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cached_tokens=(getattr(details, "cached_tokens", None) or 0) if details else 0,
    )


def translate_error(exc: Exception) -> Failure | None:
    """The neutral form of an SDK error, or None when it is not an API failure."""
    if isinstance(exc, openai.APIStatusError):
        return status_failure(exc.status_code, exc.response.headers, exc.body, exc.message)
    if isinstance(exc, openai.APITimeoutError):
        return Failure("request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return Failure(f"connection error: {exc.__cause__ or exc}")
    return None
