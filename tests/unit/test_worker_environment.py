"""The credentials a worker is given follow its profile's whole model chain."""

from __future__ import annotations

from kanban.dispatcher.environment import worker_env

ENV = {"PATH": "/bin", "OPENAI_API_KEY": "sk-o", "OPENAI_BASE_URL": "http://o",
       "ANTHROPIC_API_KEY": "sk-a", "KEY_A": "a-key", "KEY_B": "b-key", "OTHER_SECRET": "x"}


def test_fallback_providers_and_named_keys_are_passed_and_nothing_else() -> None:
    env = worker_env(ENV, model="openai-responses:gpt-5", base_url=None, card={"KANBAN_CARD": "1"},
                     fallback=["anthropic:claude-haiku-4-5"], key_vars=["KEY_A", "KEY_B"])
    assert {k: env[k] for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY",
                                "KEY_A", "KEY_B")} == {
        "OPENAI_API_KEY": "sk-o", "OPENAI_BASE_URL": "http://o", "ANTHROPIC_API_KEY": "sk-a",
        "KEY_A": "a-key", "KEY_B": "b-key"}
    assert "OTHER_SECRET" not in env and env["KANBAN_MODEL"] == "openai-responses:gpt-5"


def test_a_single_provider_gets_only_its_own_key() -> None:
    env = worker_env(ENV, model="anthropic:claude", base_url="http://proxy", card={})
    assert env["ANTHROPIC_API_KEY"] == "sk-a" and env["ANTHROPIC_BASE_URL"] == "http://proxy"
    assert "OPENAI_API_KEY" not in env and "KEY_A" not in env
    responses = worker_env(ENV, model="openai-responses:m", base_url="http://proxy", card={})
    assert responses["OPENAI_BASE_URL"] == "http://proxy"
