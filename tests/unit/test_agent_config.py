"""config.toml keys of the agent runtime: fallbacks, keys, API mode, reasoning, cost,
context, prices and hooks."""

from __future__ import annotations

import pytest

from kanban.state.config import ModelPrice, Profile
from kanban.state.config_parse import parse_config
from kanban.state.errors import ConfigError


def test_agent_keys_are_parsed() -> None:
    config = parse_config({
        "profiles": {"smart": {
            "model": "openai:gpt-4o", "fallback": ["anthropic:claude-sonnet-4-5"],
            "api_key_env": ["KEY_A", "KEY_B"], "api": "responses", "reasoning": "high",
            "max_cost": 2, "context_window": 64000, "compress_at": 0.6,
            "tool_result_chars": 8000, "max_parallel_tools": 4}},
        "prices": {"openai:gpt-4o": {"input": 2, "output": 8.5, "cached": 1},
                   "local": {"input": 0, "output": 0}},
        "hooks": {"pre_tool": "pkg.mod:check", "on_finish": ["a:b", "c.d:e"],
                  "entry_points": False},
    })
    smart = config.profile("smart")
    assert smart.fallback == ("anthropic:claude-sonnet-4-5",)
    assert smart.api_key_env == ("KEY_A", "KEY_B") and smart.api == "responses"
    assert (smart.reasoning, smart.max_cost, smart.context_window) == ("high", 2.0, 64000)
    assert (smart.compress_at, smart.tool_result_chars, smart.max_parallel_tools) == (
        0.6, 8000, 4)
    assert config.prices == {"openai:gpt-4o": ModelPrice(2.0, 8.5, 1.0),
                             "local": ModelPrice(0.0, 0.0, None)}
    assert config.hooks == {"pre_tool": ("pkg.mod:check",), "on_finish": ("a:b", "c.d:e")}
    assert config.hook_entry_points is False


def test_defaults() -> None:
    config = parse_config({"profiles": {"p": {"api_key_env": "ONE_KEY"}}})
    assert config.profile("p").api_key_env == ("ONE_KEY",)
    default = Profile()
    assert (default.fallback, default.max_cost, default.compress_at) == ((), None, 0.5)
    assert (default.tool_result_chars, default.max_parallel_tools) == (16_000, 8)
    assert config.prices == {} and config.hooks == {} and config.hook_entry_points


@pytest.mark.parametrize(("raw", "message"), [
    ({"profiles": {"p": {"api": "grpc"}}}, "api must be"),
    ({"profiles": {"p": {"reasoning": "max"}}}, "reasoning must be"),
    ({"profiles": {"p": {"compress_at": 1.5}}}, "compress_at must be between 0 and 1"),
    ({"profiles": {"p": {"max_cost": -1}}}, "max_cost must be a positive number"),
    ({"profiles": {"p": {"fallback": "openai:x"}}}, "fallback must be a list of strings"),
    ({"profiles": {"p": {"max_parallel_tools": 0}}}, "max_parallel_tools must be at least 1"),
    ({"prices": {"m": {"input": 1}}}, "needs input and output"),
    ({"prices": {"m": {"input": 1, "output": -2}}}, "output must be a non-negative number"),
    ({"prices": {"m": {"input": 1, "output": 2, "write": 3}}}, "unknown key 'write'"),
    ({"prices": 3}, r"\[prices\] must be a table"),
    ({"hooks": {"before": ["a:b"]}}, "unknown event 'before'"),
    ({"hooks": {"pre_tool": ["no-colon"]}}, "must list"),
    ({"hooks": {"entry_points": "yes"}}, "entry_points must be true or false"),
])
def test_bad_agent_keys_are_refused(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)
