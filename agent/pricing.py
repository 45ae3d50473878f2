"""What tokens cost, and how large each model's context window is.

Both tables match a model by the longest known prefix of its name, so dated snapshots
(`gpt-4o-2024-08-06`, `claude-sonnet-4-5-20250929`) find their family. Config overrides
win over the built-in rows; a model that matches nothing has no price (its cost is
unknown, not zero) and a conservative window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kanban.agent.types import Usage


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens: fresh input, output, and input read from a cache."""

    input: float
    output: float
    cached: float | None = None  # None: cached input costs as much as fresh input

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_rate = self.input if self.cached is None else self.cached
        dollars = ((usage.input_tokens - cached) * self.input + cached * cached_rate
                   + usage.output_tokens * self.output)
        return dollars / 1_000_000


# Published list prices (USD per million tokens), for the models people use most.
PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "o3": Price(2.00, 8.00, 0.50),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o4-mini": Price(1.10, 4.40, 0.275),
    "claude-opus-4": Price(15.00, 75.00, 1.50),
    "claude-opus-4-5": Price(5.00, 25.00, 0.50),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30),
    "claude-3-7-sonnet": Price(3.00, 15.00, 0.30),
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08),
}

# Context windows in tokens.
WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-": 200_000,
}
DEFAULT_WINDOW = 32_768  # unknown models (often local ones) get a modest window


def bare_name(model: str) -> str:
    """`openai:gpt-4o` → `gpt-4o`; a name without a provider is returned as it is."""
    provider, colon, name = model.partition(":")
    return name if colon and provider in _PROVIDERS else model


_PROVIDERS = frozenset({"openai", "openai-responses", "anthropic", "scripted"})


def longest_prefix(table: Mapping[str, object], model: str) -> str | None:
    """The key of `table` that is the longest prefix of `model`, if any."""
    best = None
    for key in table:
        if model.startswith(key) and (best is None or len(key) > len(best)):
            best = key
    return best


class PriceTable:
    """The built-in prices with config overrides; `overrides` may key by spec or name."""

    def __init__(self, overrides: Mapping[str, Price] | None = None) -> None:
        self.overrides = dict(overrides or {})

    def price(self, model: str) -> Price | None:
        """The most specific match: the longest prefix, a config row winning a tie."""
        if model.startswith("scripted:"):
            return Price(0.0, 0.0, 0.0)  # offline models are free
        name = bare_name(model)
        best: tuple[int, int, Price] | None = None
        for rank, table in ((1, self.overrides), (0, PRICES)):
            for candidate in (model, name):
                key = longest_prefix(table, candidate)
                if key is not None:
                    found = (len(bare_name(key)), rank, table[key])
                    if best is None or found[:2] > best[:2]:
                        best = found
        return best[2] if best is not None else None

    def cost(self, usage: Usage, model: str) -> float | None:
        """The dollars `usage` cost on `model`, or None when its price is unknown."""
        price = self.price(model)
        return None if price is None else price.cost(usage)


def context_window(model: str, override: int | None = None) -> int:
    """The model's context window in tokens (`override` wins)."""
    if override:
        return override
    key = longest_prefix(WINDOWS, bare_name(model))
    return WINDOWS[key] if key is not None else DEFAULT_WINDOW
