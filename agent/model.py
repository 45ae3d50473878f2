"""The `Model` protocol and `resolve_model`, which turns a spec string into a model."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from agent.errors import FatalModelError
from agent.retry import RetryPolicy
from agent.types import Message, ModelResponse, ToolSpec

PROVIDERS = ("openai", "anthropic", "scripted")
API_KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
BASE_URL_VARS = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


@runtime_checkable
class Model(Protocol):
    """Given messages and tool schemas, return text and/or tool calls, usage, a stop reason."""

    name: str

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        ...


def parse_spec(spec: str) -> tuple[str, str]:
    """Split `provider:model`, refusing unknown providers and empty model names."""
    provider, colon, name = spec.partition(":")
    if not colon:
        raise FatalModelError(
            f"model spec {spec!r} must look like openai:MODEL, anthropic:MODEL or scripted:NAME"
        )
    if provider not in PROVIDERS:
        raise FatalModelError(
            f"unknown model provider {provider!r} in {spec!r} (known: {', '.join(PROVIDERS)})"
        )
    if not name.strip():
        raise FatalModelError(f"model spec {spec!r} names no model")
    return provider, name.strip()


def resolve_model(
    spec: str,
    *,
    env: Mapping[str, str] | None = None,
    api_key: str | None = None,
    base_url: str | None = None,
    timeout: float = 120,
    retry: RetryPolicy | None = None,
    max_tokens: int | None = None,
) -> Model:
    """A ready model for `spec`; configuration problems raise FatalModelError before any call."""
    provider, name = parse_spec(spec)
    if provider == "scripted":
        from agent.scripts import load_script

        return load_script(name)
    env = os.environ if env is None else env
    key = api_key or env.get(API_KEY_VARS[provider], "")
    if not key:
        raise FatalModelError(f"{API_KEY_VARS[provider]} is not set; model {spec!r} needs it")
    url = base_url or env.get(BASE_URL_VARS[provider]) or None
    if provider == "openai":
        return _openai(name, key, url, timeout, retry, max_tokens)
    return _anthropic(name, key, url, timeout, retry, max_tokens)


def _openai(
    name: str,
    key: str,
    url: str | None,
    timeout: float,
    retry: RetryPolicy | None,
    max_tokens: int | None,
) -> Model:
    from agent.openai_model import DEFAULT_BASE_URL, OpenAIModel

    return OpenAIModel(
        name,
        api_key=key,
        base_url=url or DEFAULT_BASE_URL,
        timeout=timeout,
        retry=retry,
        max_tokens=max_tokens,
    )


def _anthropic(
    name: str,
    key: str,
    url: str | None,
    timeout: float,
    retry: RetryPolicy | None,
    max_tokens: int | None,
) -> Model:
    from agent.anthropic_model import DEFAULT_BASE_URL, DEFAULT_MAX_TOKENS, AnthropicModel

    return AnthropicModel(
        name,
        api_key=key,
        base_url=url or DEFAULT_BASE_URL,
        timeout=timeout,
        retry=retry,
        max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
    )
