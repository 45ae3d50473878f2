"""resolve_model: spec strings and configuration errors, before any network call."""

from __future__ import annotations

import pytest

from kanban.agent import FatalModelError, Model, ScriptedModel, resolve_model
from kanban.agent.anthropic_model import AnthropicModel
from kanban.agent.openai_model import OpenAIModel


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpt-4o", "must look like openai:MODEL"),
        ("mistral:large", "unknown model provider 'mistral'"),
        ("openai:", "names no model"),
        ("anthropic:  ", "names no model"),
        ("scripted:", "names no model"),
    ],
)
def test_bad_specs_are_fatal(spec: str, message: str) -> None:
    with pytest.raises(FatalModelError, match=message):
        resolve_model(spec, env={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("openai:gpt-4o", "OPENAI_API_KEY"), ("anthropic:claude-x", "ANTHROPIC_API_KEY")],
)
def test_missing_api_key_is_fatal(spec: str, variable: str) -> None:
    with pytest.raises(FatalModelError, match=f"{variable} is not set"):
        resolve_model(spec, env={})


def test_openai_model_from_env() -> None:
    env = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    model = resolve_model("openai:gpt-test", env=env)
    assert isinstance(model, OpenAIModel) and isinstance(model, Model)
    assert model.name == "openai:gpt-test" and model.model == "gpt-test"
    model.close()


def test_anthropic_model_with_explicit_key() -> None:
    model = resolve_model("anthropic:claude-test", env={}, api_key="k", base_url="http://x")
    assert isinstance(model, AnthropicModel)
    assert model.name == "anthropic:claude-test"
    model.close()


def test_scripted_needs_no_key() -> None:
    model = resolve_model("scripted:demo", env={})
    assert isinstance(model, ScriptedModel) and model.name == "scripted:demo"


def test_responses_models_use_openai_credentials() -> None:
    from kanban.agent.openai_responses import ResponsesModel

    model = resolve_model("openai-responses:gpt-5-mini", env={"OPENAI_API_KEY": "k"},
                          reasoning="low")
    assert isinstance(model, ResponsesModel) and model.name == "openai-responses:gpt-5-mini"
    model.close()
    with pytest.raises(FatalModelError, match="OPENAI_API_KEY is not set"):
        resolve_model("openai-responses:gpt-5", env={})


def test_a_bad_reasoning_level_is_fatal() -> None:
    from kanban.agent import resolve_chain
    from kanban.agent.model import ModelOptions

    with pytest.raises(FatalModelError, match="reasoning must be one of"):
        resolve_chain("scripted:demo", env={}, options=ModelOptions(reasoning="extreme"))
