"""The `Model` protocol and `resolve_model`, which turns a spec string into a model."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace

from kanban.agent.adapters import PROVIDERS, ModelOptions, build_direct, parse_spec
from kanban.agent.errors import FatalModelError
from kanban.agent.fallback import FallbackModel, OnFallback
from kanban.agent.retry import RetryPolicy
from kanban.agent.types import Model

__all__ = ["PROVIDERS", "Model", "ModelOptions", "credentials_of", "parse_spec", "resolve_chain",
           "resolve_model"]

# Which credentials a provider's models use (Responses is OpenAI's other API).
CREDENTIALS = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
API_KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
BASE_URL_VARS = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
REASONING_LEVELS = ("low", "medium", "high")
# Where each provider's SDK goes without a base URL (the adapters' DEFAULT_BASE_URL)
DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}


def endpoint_for(spec: str, *, base_url: str | None, env: Mapping[str, str]) -> str | None:
    """The URL a spec's model would be called at (None: a model that calls nothing)."""
    family = CREDENTIALS.get(spec.partition(":")[0])
    if family is None:
        return None
    return base_url or env.get(BASE_URL_VARS[family]) or DEFAULT_URLS[family]


def credentials_of(spec: str) -> str | None:
    """`openai` or `anthropic`: whose key and base URL a spec's model needs (None: none)."""
    return CREDENTIALS.get(spec.partition(":")[0])


def resolve_model(
    spec: str,
    *,
    env: Mapping[str, str] | None = None,
    api_key: str | Sequence[str] | None = None,
    base_url: str | None = None,
    timeout: float = 120,
    retry: RetryPolicy | None = None,
    max_tokens: int | None = None,
    reasoning: str | None = None,
) -> Model:
    """A ready model for `spec`; configuration problems raise FatalModelError before any call."""
    options = ModelOptions(base_url=base_url, timeout=timeout, retry=retry,
                           max_tokens=max_tokens, reasoning=reasoning)
    keys = [api_key] if isinstance(api_key, str) else list(api_key or ())
    return _build(spec, os.environ if env is None else env, options, keys)


def resolve_chain(
    primary: str,
    fallbacks: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    options: ModelOptions = ModelOptions(),
    on_fallback: OnFallback | None = None,
) -> Model:
    """The primary model, wrapped with its fallbacks when it has any.

    Every model of the chain is built now, so a missing key of a fallback fails the run
    before the first call. With fallbacks, outage errors hand over at once.
    """
    env = os.environ if env is None else env
    if options.reasoning and options.reasoning not in REASONING_LEVELS:
        raise FatalModelError(f"reasoning must be one of {', '.join(REASONING_LEVELS)}, "
                              f"not {options.reasoning!r}")
    specs = [primary, *fallbacks]
    retry = options.retry or RetryPolicy()
    if fallbacks:
        retry = replace(retry, hand_over_outages=True)
    built = []
    for index, spec in enumerate(specs):
        keys = _configured_keys(spec, env, options)
        chosen = replace(options, retry=retry, base_url=options.base_url if index == 0 else None)
        built.append(_build(spec, env, chosen, keys))
    if len(built) == 1:
        return built[0]
    return FallbackModel(built, on_fallback)


def _configured_keys(spec: str, env: Mapping[str, str], options: ModelOptions) -> list[str]:
    provider = credentials_of(spec)
    if not options.api_key_vars or provider is None or provider != options.key_provider:
        return []
    missing = [name for name in options.api_key_vars if not env.get(name)]
    if missing:
        raise FatalModelError(f"API key variable(s) {', '.join(missing)} not set; "
                              f"model {spec!r} needs them (api_key_env)")
    return [env[name] for name in options.api_key_vars]


def _build(spec: str, env: Mapping[str, str], options: ModelOptions, keys: list[str]) -> Model:
    provider, name = parse_spec(spec)
    if provider == "scripted":
        from kanban.agent.scripts import load_script

        return load_script(name)
    family = CREDENTIALS[provider]
    if not keys:
        key = env.get(API_KEY_VARS[family], "")
        if not key:
            raise FatalModelError(f"{API_KEY_VARS[family]} is not set; model {spec!r} needs it")
        keys = [key]
    options = replace(options, base_url=options.base_url or env.get(BASE_URL_VARS[family]))
    import kanban.agent.gateway as gateway

    if gateway.available():  # a forked worker: its forkserver's gateway makes the calls
        route = gateway.Route.of(spec, keys, base_url=options.base_url, timeout=options.timeout,
                                 max_tokens=options.max_tokens, reasoning=options.reasoning,
                                 responses_api=options.responses_api, retry=options.retry)
        wire = "openai-responses" if options.responses_api and provider == "openai" \
            else provider
        return gateway.GatewayModel(route, f"{wire}:{name}",
                                    lambda: build_direct(spec, options, keys))
    return build_direct(spec, options, keys)
