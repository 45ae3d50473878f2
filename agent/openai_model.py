"""OpenAI Chat Completions adapter, streaming; works with any OpenAI-compatible server
(vLLM, Ollama, llama.cpp), including the `reasoning_content` some of them stream."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import openai

import kanban.agent.tls as tls
from kanban.agent.errors import ModelError
from kanban.agent.keys import KeyRing
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
    ToolSpec,
    Usage,
)

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIModel:
    """A `Model` over streamed `client.chat.completions.create`; the SDK's retries are off."""

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
        request = build_request(self.model, messages, tools, self._max_tokens)
        request |= {"stream": True, "stream_options": {"include_usage": True}}
        if self._reasoning:
            request["reasoning_effort"] = self._reasoning

        def attempt() -> ModelResponse:
            with self._keys.client.chat.completions.create(**request) as chunks:
                return read_stream(chunks, ReplyBuilder(on_event), self.model)

        self._keys.begin()
        try:
            response = call_with_retries(
                attempt, translate_error, self._retry, provider=PROVIDER, model=self.model,
                rotate_key=self._keys.rotate, endpoint=self.endpoint,
                on_retry=lambda failure: on_event(StreamRestart(failure.describe())),
            )
        except openai.OpenAIError as exc:
            raise at_endpoint(ModelError(f"{PROVIDER}: {type(exc).__name__}: {exc}"),
                              self.endpoint) from exc
        return replace(response, source=self.name)

    def close(self) -> None:
        self._keys.close()


def make_client(key: str, base_url: str, timeout: float,
                transport: Any = None) -> openai.OpenAI:
    http = openai.DefaultHttpxClient(verify=tls.context(), transport=transport)
    return openai.OpenAI(api_key=key, base_url=base_url, max_retries=0, timeout=timeout,
                         http_client=http)


def build_request(
    model: str, messages: Sequence[Message], tools: Sequence[ToolSpec], max_tokens: int | None
) -> dict[str, Any]:
    """Keyword arguments for `chat.completions.create` (without the streaming options)."""
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


def read_stream(chunks: Any, reply: ReplyBuilder, model: str) -> ModelResponse:
    """Fold `ChatCompletionChunk`s into one response, telling the listener as they come."""
    usage, finish, reported, seen = Usage(), "stop", model, False
    for chunk in chunks:
        seen = True
        reported = chunk.model or reported
        if chunk.usage is not None:
            usage = parse_usage(chunk.usage)
        for choice in chunk.choices or ():
            if choice.index:
                continue  # we never ask for more than one choice
            delta = choice.delta
            if delta is not None:
                reply.reasoning(reasoning_of(delta))
                reply.text(delta.content)
                for call in delta.tool_calls or ():
                    function = call.function
                    reply.call(call.index, id=call.id,
                               name=function.name if function else None,
                               arguments=function.arguments if function else None)
            finish = choice.finish_reason or finish
    if not seen:
        raise ModelError(f"{PROVIDER}: model {model!r} sent an empty stream")
    return reply.response(usage=usage, stop_reason=finish, model=reported)


def reasoning_of(delta: Any) -> str | None:
    """`reasoning_content` (vLLM, DeepSeek) or `reasoning` (OpenRouter, Ollama), if sent."""
    extra = getattr(delta, "model_extra", None) or {}
    for key in ("reasoning_content", "reasoning"):
        value = getattr(delta, key, None) or extra.get(key)
        if isinstance(value, str) and value:
            return value
    return None


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
        cause = exc.__cause__ or exc
        return Failure(f"connection error: {cause}", refused=refused(cause))
    if isinstance(exc, openai.APIError):  # an error event in the middle of a stream
        return stream_failure(exc.body, exc.message)
    return None


def stream_failure(body: object, message: str) -> Failure:
    """An error reported inside a stream, with the status its code stands for."""
    code = ""
    if isinstance(body, dict):
        code = str(body.get("code") or body.get("type") or "")
        message = str(body.get("message") or message)
    status = 500
    if "context_length" in code or "context_length" in message:
        status = 400
    elif "rate_limit" in code:
        status = 429
    elif "overloaded" in code or "unavailable" in code:
        status = 503
    elif code in ("invalid_request_error", "invalid_prompt"):
        status = 400
    return Failure(f"{message} (in the stream)", status=status)


def refused(cause: BaseException) -> bool:
    """True when nothing listened at the address (the provider is unreachable)."""
    seen: BaseException | None = cause
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False
