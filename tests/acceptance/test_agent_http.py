"""The real openai and anthropic clients against the local LLM server, through the agent loop."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from kanban.agent import (
    Limits,
    Message,
    Model,
    ModelResponse,
    RetryPolicy,
    ScriptedModel,
    StopReason,
    ToolSpec,
    Usage,
    resolve_model,
    run_agent,
    text,
    tool_calls,
)
from kanban.tools import Tool, Toolbox
from tests.support.llm_server import (
    LLMServer,
    Reply,
    called_tools,
    forbidden,
    last_user_text,
    malformed_tool_reply,
    model_not_found,
    rate_limited,
    server_error,
    text_reply,
    tool_reply,
    tool_results,
    unauthorized,
)

PROVIDERS = ["openai", "anthropic"]
BASE_DELAY = 0.01


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as llm:
        yield llm


@pytest.fixture
def waits() -> list[float]:
    return []


def make_model(provider: str, server: LLMServer, waits: list[float], **retry: Any) -> Model:
    policy = RetryPolicy(sleep=waits.append, jitter=lambda: 0.0, base_delay=BASE_DELAY, **retry)
    return resolve_model(f"{provider}:test-model", env=server.env(), retry=policy)


def toolbox() -> Toolbox:
    echo = Tool(
        "echo",
        "Echo the text back as JSON",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        lambda args: json.dumps({"echo": args["text"]}),
        "test",
    )
    add = Tool(
        "add",
        "Add two integers",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        lambda args: str(args["a"] + args["b"]),
        "test",
    )
    return Toolbox([echo, add])


def run(model: Model, **kwargs: Any) -> Any:
    system = "You are a test agent."
    return run_agent(model, system=system, prompt="go", toolbox=toolbox(), **kwargs)


def tool_contents(messages: Sequence[Message]) -> list[str | None]:
    return [m.content for m in messages if m.role == "tool"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_reply(provider: str, server: LLMServer, waits: list[float]) -> None:
    server.enqueue(text_reply("hello from the server", usage=(100, 5, 60)))
    result = run(make_model(provider, server, waits))
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "hello from the server"
    assert result.usage == Usage(input_tokens=100, output_tokens=5, cached_tokens=60)
    (request,) = server.requests
    assert request.route == provider
    assert request.body["model"] == "test-model"
    assert "test-key" in request.headers.get("authorization", request.headers.get("x-api-key", ""))
    names = [t.get("name") or t["function"]["name"] for t in request.body["tools"]]
    assert names == ["echo", "add"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_call_then_answer(provider: str, server: LLMServer, waits: list[float]) -> None:
    server.enqueue(tool_reply(("add", {"a": 2, "b": 40})), text_reply("it is 42"))
    result = run(make_model(provider, server, waits))
    assert result.text == "it is 42" and result.turns == 2
    assert tool_contents(result.messages) == ["42"]
    assert tool_results(server.requests[1].body) == ["42"]
    server.assert_consumed()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_parallel_tool_calls_answer_in_call_order(
    provider: str, server: LLMServer, waits: list[float]
) -> None:
    server.enqueue(
        tool_reply(("echo", {"text": "first"}), ("add", {"a": 1, "b": 1}), ("echo", {"text": "3"})),
        text_reply("done"),
    )
    result = run(make_model(provider, server, waits))
    expected = ['{"echo": "first"}', "2", '{"echo": "3"}']
    assert tool_contents(result.messages) == expected
    assert tool_results(server.requests[1].body) == expected
    call_ids = [c.id for c in result.messages[2].tool_calls]
    assert [m.tool_call_id for m in result.messages if m.role == "tool"] == call_ids


@pytest.mark.parametrize("provider", PROVIDERS)
def test_rate_limit_waits_as_told_then_succeeds(
    provider: str, server: LLMServer, waits: list[float]
) -> None:
    server.enqueue(rate_limited(retry_after="2"), rate_limited(None, retry_after_ms="150"))
    server.enqueue(text_reply("finally"))
    result = run(make_model(provider, server, waits))
    assert result.text == "finally"
    assert waits == [2.0, 0.15]
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 3 and bodies[0] == bodies[1] == bodies[2]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_server_error_is_retried(provider: str, server: LLMServer, waits: list[float]) -> None:
    server.enqueue(server_error(500), server_error(503), text_reply("recovered"))
    result = run(make_model(provider, server, waits))
    assert result.stop_reason is StopReason.COMPLETED and result.text == "recovered"
    assert waits == [BASE_DELAY, 2 * BASE_DELAY]
    assert len(server.requests) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_retries_run_out(provider: str, server: LLMServer, waits: list[float]) -> None:
    server.enqueue(*[server_error(502)] * 3)
    result = run(make_model(provider, server, waits, max_retries=2))
    assert result.stop_reason is StopReason.ERROR and result.fatal is False
    assert result.error is not None and "after 3 attempts: HTTP 502" in result.error
    assert len(server.requests) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (unauthorized(), "authentication failed (check the API key): HTTP 401: Incorrect API key"),
        (forbidden(), "permission denied: HTTP 403"),
        (model_not_found("test-model"), "model 'test-model' not found"),
    ],
)
def test_fatal_errors_stop_at_once(
    provider: str, reply: Reply, words: str, server: LLMServer, waits: list[float]
) -> None:
    server.enqueue(reply, text_reply("never served"))
    result = run(make_model(provider, server, waits))
    assert result.stop_reason is StopReason.ERROR and result.fatal is True
    assert result.error is not None and result.error.startswith(f"{provider}: ")
    assert words in result.error
    assert len(server.requests) == 1 and waits == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_malformed_tool_arguments_are_fed_back(
    provider: str, server: LLMServer, waits: list[float]
) -> None:
    server.enqueue(malformed_tool_reply("add", '{"a": 1, "b":'))
    server.enqueue(tool_reply(("add", {"a": 1, "b": 2})), text_reply("3, after a retry"))
    result = run(make_model(provider, server, waits))
    assert result.stop_reason is StopReason.COMPLETED and result.text == "3, after a retry"
    first, second = [m for m in result.messages if m.role == "tool"]
    assert first.is_error and "invalid arguments for tool add" in (first.content or "")
    assert second.content == "3" and not second.is_error
    fed_back = tool_results(server.requests[1].body)
    assert len(fed_back) == 1 and "not valid JSON" in fed_back[0]


def test_anthropic_request_carries_cache_markers(server: LLMServer, waits: list[float]) -> None:
    server.enqueue(text_reply("cached"))
    run(make_model("anthropic", server, waits))
    body = server.requests[0].body
    assert body["system"] == [
        {"type": "text", "text": "You are a test agent.", "cache_control": {"type": "ephemeral"}}
    ]
    assert [t.get("cache_control") for t in body["tools"]] == [None, {"type": "ephemeral"}]
    assert body["max_tokens"] == 4096
    assert all(m["role"] != "system" for m in body["messages"])


def test_openai_compatible_server_without_v1_prefix(server: LLMServer) -> None:
    server.enqueue(text_reply("compatible"))
    model = resolve_model("openai:local", env={"OPENAI_API_KEY": "x"}, base_url=server.url)
    assert run(model).text == "compatible"
    assert server.requests[0].path == "/chat/completions"


def test_connection_errors_are_retried_then_transient(waits: list[float]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    policy = RetryPolicy(sleep=waits.append, jitter=lambda: 0.0, max_retries=1)
    result = run(resolve_model("openai:m", env=env, retry=policy))
    assert result.stop_reason is StopReason.ERROR and not result.fatal
    assert result.error is not None and "connection error" in result.error
    assert len(waits) == 1


# --- one conversation, three adapters ---------------------------------------------------


def next_move(results: list[str]) -> tuple[str, dict[str, Any]] | str:
    """The scripted 'model': add, echo the sum, then answer from what the tools said."""
    if not results:
        return ("add", {"a": 19, "b": 23})
    if len(results) == 1:
        return ("echo", {"text": f"sum={results[0]}"})
    return f"final: {json.loads(results[1])['echo']}"


def responder(body: dict[str, Any]) -> Reply:
    move = next_move(tool_results(body))
    return text_reply(move) if isinstance(move, str) else tool_reply(move)


def scripted_step(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
    move = next_move([m.content or "" for m in messages if m.role == "tool"])
    return text(move) if isinstance(move, str) else tool_calls([move])


@pytest.mark.parametrize("adapter", ["openai", "anthropic", "scripted"])
def test_same_conversation_on_every_adapter(adapter: str, waits: list[float]) -> None:
    with LLMServer(responder=responder) as llm:
        if adapter == "scripted":
            model: Model = ScriptedModel([scripted_step] * 3)
        else:
            model = make_model(adapter, llm, waits)
        result = run(model, limits=Limits(max_turns=5))
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "final: sum=42"
    assert result.turns == 3
    assert tool_contents(result.messages) == ["42", '{"echo": "sum=42"}']
    roles = [m.role for m in result.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_importing_agent_does_not_import_the_sdks() -> None:
    code = (
        "import sys, kanban.agent, kanban.agent.scripts, kanban.tools\n"
        "assert 'openai' not in sys.modules and 'anthropic' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_preload_imports_the_adapters() -> None:
    from kanban import agent

    agent.preload()
    wanted = {"kanban.agent.openai_model", "kanban.agent.anthropic_model", "openai", "anthropic"}
    assert wanted <= set(sys.modules)


# --- the server's own behaviour, which other suites rely on ------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_unscripted_request_fails_fast(
    provider: str, server: LLMServer, waits: list[float]
) -> None:
    result = run(make_model(provider, server, waits))
    assert result.fatal and result.error is not None
    assert "llm_server: no reply scripted" in result.error
    assert server.wait_for_requests(1, timeout=5)[0].route == provider


@pytest.mark.parametrize("provider", PROVIDERS)
def test_responder_helpers_read_both_formats(provider: str, waits: list[float]) -> None:
    seen: list[tuple[list[str], str]] = []

    def answer(body: dict[str, Any]) -> Reply:
        seen.append((called_tools(body), last_user_text(body)))
        if not called_tools(body):
            return tool_reply(("echo", {"text": "x"}))
        if len(seen) == 2:
            raise RuntimeError("responder bug")
        return text_reply("unreachable")

    with LLMServer(responder=answer) as llm:
        result = run(make_model(provider, llm, waits))
    assert seen == [([], "go"), (["echo"], "go")]
    assert result.fatal and result.error is not None
    assert "llm_server responder raised RuntimeError: responder bug" in result.error


def test_wait_for_requests_times_out(server: LLMServer) -> None:
    with pytest.raises(TimeoutError, match="0 of 1 requests"):
        server.wait_for_requests(1, timeout=0.01)
