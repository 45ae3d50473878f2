"""The agent loop through the real SDK clients, streaming, against the local LLM server in
all three wire formats: parallel tools, oversized results, overflow, fallback, reasoning,
key rotation, mid-stream failures and interrupts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kanban.agent import (
    AgentHooks,
    Interrupt,
    Limits,
    Model,
    ReasoningDelta,
    RetryPolicy,
    SavedOutputs,
    StopReason,
    StreamRestart,
    TextDelta,
    ToolCallDelta,
    Usage,
    resolve_chain,
    run_agent,
)
from kanban.agent.context import SUMMARY_SYSTEM
from kanban.agent.model import ModelOptions
from kanban.agent.outputs import READ_TOOL
from kanban.tools import Tool, Toolbox
from tests.support.llm_server import (
    LLMServer,
    Reply,
    context_overflow,
    rate_limited,
    server_error,
    system_text,
    text_reply,
    tool_reply,
    tool_results,
)

WIRES = ["openai", "anthropic", "openai-responses"]
ROUTE = {"openai": "openai", "anthropic": "anthropic", "openai-responses": "responses"}


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as llm:
        yield llm


def model(wire: str, server: LLMServer, *fallbacks: str, **options: Any) -> Model:
    retry = RetryPolicy(sleep=lambda s: None, jitter=lambda: 0.0, base_delay=0.0,
                        max_retries=options.pop("max_retries", 3))
    return resolve_chain(f"{wire}:test-model", fallbacks, env=server.env(),
                         options=ModelOptions(retry=retry, **options))


class Listener(AgentHooks):
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.fallbacks: list[tuple[str, str]] = []

    def on_event(self, event: Any) -> None:
        self.events.append(event)

    def on_fallback(self, old_model: str, new_model: str, reason: str) -> None:
        self.fallbacks.append((old_model, new_model))


def sleepy_toolbox(barrier: threading.Barrier) -> Toolbox:
    def nap(args: dict[str, Any]) -> str:
        barrier.wait()  # all three must be running at once to get past this
        time.sleep(1.0)
        return f"slept {args['n']}"

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    return Toolbox([Tool("nap", "Sleep a second", schema, nap, "test")])


@pytest.mark.parametrize("wire", WIRES)
def test_three_sleeping_tools_run_together_in_call_order(wire: str, server: LLMServer) -> None:
    server.enqueue(tool_reply(("nap", {"n": 1}), ("nap", {"n": 2}), ("nap", {"n": 3})),
                   text_reply("rested"))
    barrier = threading.Barrier(3, timeout=2.5)  # sequential naps would break it
    result = run_agent(model(wire, server), system="s", prompt="nap three times",
                       toolbox=sleepy_toolbox(barrier))
    assert result.stop_reason is StopReason.COMPLETED and result.text == "rested"
    expected = ["slept 1", "slept 2", "slept 3"]
    assert [m.content for m in result.messages if m.role == "tool"] == expected
    assert tool_results(server.requests[1].body) == expected
    assert all(r.body.get("stream") is True for r in server.requests)


@pytest.mark.parametrize("wire", WIRES)
def test_a_5mb_result_never_reaches_the_next_request(wire: str, server: LLMServer,
                                                     tmp_path: Path) -> None:
    big = "".join(f"row {i:07d}\n" for i in range(420_000))  # 5 MB
    assert len(big) >= 5_000_000
    dump = Tool("dump", "Dump everything", {"type": "object", "properties": {}},
                lambda args: big, "test")

    def agent(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if not results:
            return tool_reply(("dump", {}))
        if len(results) == 1:
            path = results[0].split("saved as ", 1)[1].split(" ", 1)[0]
            return tool_reply((READ_TOOL, {"path": path, "offset": 3_000_000, "limit": 24}))
        return text_reply("found " + results[1].splitlines()[-1])

    server.responder = agent
    result = run_agent(model(wire, server), system="s", prompt="dump it",
                       toolbox=Toolbox([dump]), outputs=SavedOutputs(tmp_path))
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "found " + big[3_000_000:3_000_024].splitlines()[-1]
    assert all(r.size < 100_000 for r in server.requests), [r.size for r in server.requests]
    assert len(server.requests) == 3


@pytest.mark.parametrize("wire", WIRES)
def test_an_overflow_error_compresses_and_the_run_succeeds(wire: str,
                                                           server: LLMServer) -> None:
    server.enqueue(tool_reply(("echo", {"text": "one"})), tool_reply(("echo", {"text": "two"})),
                   tool_reply(("echo", {"text": "three"})), context_overflow(),
                   text_reply("one, two and three were echoed"),  # the summary
                   text_reply("all done"))
    result = run_agent(model(wire, server), system="s", prompt="echo three words",
                       toolbox=echo_box())
    assert result.stop_reason is StopReason.COMPLETED and result.text == "all done"
    assert result.compressions == 1
    summary_request, retry = server.requests[4], server.requests[5]
    assert system_text(summary_request.body) == SUMMARY_SYSTEM
    assert "tools" not in summary_request.body
    assert retry.size < server.requests[3].size  # the middle is gone
    assert "one, two and three were echoed" in json.dumps(retry.body)
    server.assert_consumed()


def echo_box() -> Toolbox:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return Toolbox([Tool("echo", "Echo", schema, lambda args: args["text"] * 3, "test")])


@pytest.mark.parametrize(("primary", "backup"), [("openai", "anthropic"),
                                                 ("anthropic", "openai-responses"),
                                                 ("openai-responses", "openai")])
def test_a_primary_failing_forever_hands_over_to_the_fallback(
        primary: str, backup: str, server: LLMServer) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        return text_reply("the backup answered")

    server.responder = answer
    down = server_error(500)
    server.enqueue(tool_reply(("echo", {"text": "x"})), down, down, down)  # 1 + 2 retries
    listener = Listener()
    chain = model(primary, server, f"{backup}:backup-model", max_retries=2)
    result = run_agent(chain, system="s", prompt="go", toolbox=echo_box(), hooks=listener)
    assert result.stop_reason is StopReason.COMPLETED and result.text == "the backup answered"
    assert listener.fallbacks == [(f"{primary}:test-model", f"{backup}:backup-model")]
    routes = [r.route for r in server.requests]
    assert routes == [ROUTE[primary]] * 4 + [ROUTE[backup]]
    answered = [m.model for m in result.messages if m.role == "assistant"]
    assert answered == [f"{primary}:test-model", f"{backup}:backup-model"]
    # the conversation, tool call and result included, was converted to the backup's format
    assert tool_results(server.requests[-1].body) == ["xxx"]


@pytest.mark.parametrize("wire", WIRES)
def test_reasoning_streams_and_is_kept(wire: str, server: LLMServer) -> None:
    server.enqueue(tool_reply(("echo", {"text": "a"}), reasoning="First I will echo a.",
                              chunk_chars=4),
                   text_reply("done", reasoning="That worked.", usage=(50, 5, 20)))
    listener = Listener()
    result = run_agent(model(wire, server), system="s", prompt="go", toolbox=echo_box(),
                       hooks=listener)
    first, second = [m for m in result.messages if m.role == "assistant"]
    assert first.reasoning == "First I will echo a." and second.reasoning == "That worked."
    streamed = "".join(e.text for e in listener.events if isinstance(e, ReasoningDelta))
    assert streamed == "First I will echo a.That worked."
    assert sum(isinstance(e, ReasoningDelta) for e in listener.events) >= 5  # in pieces
    assert any(isinstance(e, ToolCallDelta) and e.name == "echo" for e in listener.events)
    assert any(isinstance(e, TextDelta) for e in listener.events)
    assert result.usage.input_tokens >= 50 and result.usage.cached_tokens == 20


@pytest.mark.parametrize("wire", WIRES)
def test_a_stream_broken_midway_is_retried(wire: str, server: LLMServer) -> None:
    server.enqueue(text_reply("x" * 100, chunk_chars=10, fail_after=3),
                   text_reply("whole answer"))
    listener = Listener()
    result = run_agent(model(wire, server), system="s", prompt="go", toolbox=echo_box(),
                       hooks=listener)
    assert result.text == "whole answer" and len(server.requests) == 2
    assert any(isinstance(e, StreamRestart) for e in listener.events)


@pytest.mark.parametrize("wire", WIRES)
def test_keys_rotate_on_rate_limits(wire: str, server: LLMServer) -> None:
    server.enqueue(rate_limited(retry_after="30"), text_reply("second key worked"))
    env = server.env() | {"KEY_A": "key-aaaa", "KEY_B": "key-bbbb"}
    family = "anthropic" if wire == "anthropic" else "openai"
    chain = resolve_chain(f"{wire}:test-model", env=env, options=ModelOptions(
        api_key_vars=("KEY_A", "KEY_B"), key_provider=family,
        retry=RetryPolicy(sleep=lambda s: pytest.fail("no wait: another key was free"))))
    result = run_agent(chain, system="s", prompt="go", toolbox=echo_box())
    assert result.text == "second key worked"
    keys = [r.headers.get("x-api-key") or r.headers["authorization"] for r in server.requests]
    assert ["key-aaaa" in keys[0], "key-bbbb" in keys[1]] == [True, True]


@pytest.mark.parametrize("wire", WIRES)
def test_an_interrupt_stops_a_streaming_call(wire: str, server: LLMServer) -> None:
    server.enqueue(text_reply("word " * 600, chunk_chars=5, chunk_delay=0.05))  # ~30 s
    interrupt = Interrupt()

    class Cancelling(AgentHooks):
        def on_event(self, event: Any) -> None:
            interrupt.cancel("the card was cancelled")

    result = run_agent(model(wire, server), system="s", prompt="talk", toolbox=echo_box(),
                       hooks=Cancelling(), interrupt=interrupt)
    assert result.stop_reason is StopReason.INTERRUPTED
    assert result.error == "the card was cancelled" and result.usage == Usage()
    server.wait_for_abort(timeout=10)  # the client hung up instead of reading on


def test_the_responses_api_mode_of_a_profile(server: LLMServer) -> None:
    server.enqueue(text_reply("via responses"))
    result = run_agent(model("openai", server, responses_api=True), system="s", prompt="go",
                       toolbox=echo_box())
    assert result.text == "via responses"
    assert server.requests[0].route == "responses"
    assert result.messages[-1].model == "openai-responses:test-model"


def test_known_prices_turn_usage_into_cost(server: LLMServer) -> None:
    server.enqueue(text_reply("priced", usage=(1_000_000, 100_000, 0)))
    result = run_agent(resolve_chain("openai:gpt-4o-mini", env=server.env()), system="s",
                       prompt="go", toolbox=echo_box(), limits=Limits(max_turns=2))
    assert result.cost == pytest.approx(0.15 + 0.06) and result.priced
