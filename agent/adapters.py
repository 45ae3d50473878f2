"""The provider adapters, built from a spec, its options and its keys (`build_direct`):
in the process that calls the provider, a cold worker or the model gateway."""

from __future__ import annotations

from dataclasses import dataclass

from kanban.agent.errors import FatalModelError
from kanban.agent.retry import RetryPolicy
from kanban.agent.types import Model

PROVIDERS = ("openai", "openai-responses", "anthropic", "scripted")


def parse_spec(spec: str) -> tuple[str, str]:
    """Split `provider:model`, refusing unknown providers and empty model names."""
    provider, colon, name = spec.partition(":")
    if not colon:
        raise FatalModelError(
            f"model spec {spec!r} must look like openai:MODEL, openai-responses:MODEL, "
            "anthropic:MODEL or scripted:NAME"
        )
    if provider not in PROVIDERS:
        raise FatalModelError(
            f"unknown model provider {provider!r} in {spec!r} (known: {', '.join(PROVIDERS)})"
        )
    if not name.strip():
        raise FatalModelError(f"model spec {spec!r} names no model")
    return provider, name.strip()


@dataclass(frozen=True)
class ModelOptions:
    """How to build models: keys from which variables, where, how long to wait, and more.

    `api_key_vars` name the variables holding the keys (several rotate on 429) for models
    of `key_provider`; others use their provider's usual variable.
    """

    api_key_vars: tuple[str, ...] = ()
    key_provider: str | None = None
    base_url: str | None = None
    timeout: float = 120
    retry: RetryPolicy | None = None
    max_tokens: int | None = None
    reasoning: str | None = None
    responses_api: bool = False  # `openai:MODEL` goes through the Responses API



def build_direct(spec: str, options: ModelOptions, keys: list[str]) -> Model:
    """The adapter for `spec`, calling its provider from this process."""
    provider, name = parse_spec(spec)
    url = options.base_url or None
    if provider == "anthropic":
        import kanban.agent.anthropic_model as wire

        return wire.AnthropicModel(
            name, api_key=keys, base_url=url or wire.DEFAULT_BASE_URL, timeout=options.timeout,
            retry=options.retry, reasoning=options.reasoning,
            max_tokens=options.max_tokens or wire.DEFAULT_MAX_TOKENS)
    if provider == "openai-responses" or options.responses_api:
        from kanban.agent.openai_responses import DEFAULT_BASE_URL, ResponsesModel

        return ResponsesModel(name, api_key=keys, base_url=url or DEFAULT_BASE_URL,
                              timeout=options.timeout, retry=options.retry,
                              reasoning=options.reasoning, max_tokens=options.max_tokens)
    from kanban.agent.openai_model import DEFAULT_BASE_URL as OPENAI_URL
    from kanban.agent.openai_model import OpenAIModel

    return OpenAIModel(name, api_key=keys, base_url=url or OPENAI_URL, timeout=options.timeout,
                       retry=options.retry, reasoning=options.reasoning,
                       max_tokens=options.max_tokens)
