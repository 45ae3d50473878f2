"""Fallback chains, key rotation on 429, outages, and interrupts."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from kanban.agent import (
    AgentHooks,
    FallbackModel,
    FatalModelError,
    Interrupt,
    Message,
    ModelResponse,
    OutageError,
    RetryPolicy,
    ScriptedModel,
    StopReason,
    ToolSpec,
    TransientModelError,
    run_agent,
    text,
    tool_call,
)
from kanban.agent.interrupt import Interrupted
from kanban.agent.keys import KeyRing
from kanban.agent.model import ModelOptions, resolve_chain
from kanban.agent.retry import Failure, call_with_retries
from kanban.tools.registry import Toolbox


def failing(error: Exception) -> Any:
    def step(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        raise error

    return step


class Moves(AgentHooks):
    def __init__(self) -> None:
        self.moves: list[tuple[str, str, str]] = []

    def on_fallback(self, old_model: str, new_model: str, reason: str) -> None:
        self.moves.append((old_model, new_model, reason))


def test_the_conversation_moves_to_the_next_model_and_stays(echo_toolbox: Toolbox) -> None:
    primary = ScriptedModel([tool_call("echo", text="a"),
                             failing(TransientModelError("openai: still 500"))],
                            name="openai:primary")
    backup = ScriptedModel([tool_call("echo", text="b"), text("done")], name="anthropic:backup")
    moves = Moves()
    result = run_agent(FallbackModel([primary, backup]), system="s", prompt="go",
                       toolbox=echo_toolbox, hooks=moves)
    assert result.stop_reason is StopReason.COMPLETED and result.text == "done"
    assert moves.moves == [("openai:primary", "anthropic:backup", "openai: still 500")]
    answered = [m.model for m in result.messages if m.role == "assistant"]
    assert answered == ["openai:primary", "anthropic:backup", "anthropic:backup"]
    # the backup saw the whole conversation, including the primary's turn
    assert [m.role for m in backup.calls[0].messages] == ["system", "user", "assistant", "tool"]


def test_fatal_errors_and_the_last_model_do_not_fall_back(echo_toolbox: Toolbox) -> None:
    bad_key = ScriptedModel([failing(FatalModelError("openai: authentication failed"))])
    chain = FallbackModel([bad_key, ScriptedModel([text("unused")])])
    result = run_agent(chain, system="s", prompt="go", toolbox=echo_toolbox)
    assert result.stop_reason is StopReason.ERROR and result.fatal
    last = FallbackModel([ScriptedModel([failing(OutageError("both down"))]),
                          ScriptedModel([failing(OutageError("also down"))])])
    result = run_agent(last, system="s", prompt="go", toolbox=echo_toolbox)
    assert result.error == "also down" and not result.fatal


def test_a_chain_builds_every_model_up_front() -> None:
    env = {"OPENAI_API_KEY": "k1", "KEY_B": "k2"}
    with pytest.raises(FatalModelError, match="ANTHROPIC_API_KEY is not set"):
        resolve_chain("openai:gpt-4o", ["anthropic:claude-sonnet-4-5"], env=env)
    with pytest.raises(FatalModelError, match="KEY_C"):
        resolve_chain("openai:gpt-4o", env=env,
                      options=ModelOptions(api_key_vars=("KEY_B", "KEY_C"), key_provider="openai"))
    chain = resolve_chain("openai:gpt-4o", ["scripted:demo"], env=env,
                          options=ModelOptions(responses_api=True))
    assert isinstance(chain, FallbackModel)
    assert chain.chain == ["openai-responses:gpt-4o", "scripted:demo"]
    assert chain.models[0]._retry.hand_over_outages  # type: ignore[attr-defined]
    single = resolve_chain("openai:gpt-4o", env=env)
    assert not isinstance(single, FallbackModel) and single.name == "openai:gpt-4o"


def test_key_ring_moves_on_refused_keys_and_comes_back() -> None:
    ring = KeyRing(["a", "b", "c"], lambda key: f"client-{key}")
    assert ring.client == "client-a"
    assert ring.rotate() and ring.client == "client-b"
    assert ring.rotate() and ring.client == "client-c"
    assert not ring.rotate()  # every key refused: back off, then all may be tried again
    assert ring.rotate() and ring.client == "client-a"
    ring.begin()
    assert ring.rotate() and ring.client == "client-b"


class Refusals:
    def __init__(self, failures: list[Failure]) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise _Fail(self.failures.pop(0))
        return "ok"


class _Fail(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure


def _translate(exc: Exception) -> Failure | None:
    return exc.failure if isinstance(exc, _Fail) else None


def test_a_429_tries_the_next_key_at_once_then_backs_off() -> None:
    waits: list[float] = []
    policy = RetryPolicy(sleep=waits.append, jitter=lambda: 0.0, base_delay=1.0)
    ring = KeyRing(["a", "b"], lambda key: key)
    attempt = Refusals([Failure("slow down", 429)] * 3)
    restarts: list[Failure] = []
    assert call_with_retries(attempt, _translate, policy, provider="p", model="m",
                             rotate_key=ring.rotate, on_retry=restarts.append) == "ok"
    # a refused → b at once; b refused → wait; b refused again → a at once; a answers
    assert attempt.calls == 4 and waits == [1.0]
    assert len(restarts) == 3


def test_outages_hand_over_only_when_a_fallback_waits() -> None:
    waits: list[float] = []
    down = [Failure("overloaded", 529)]
    with pytest.raises(OutageError, match="unavailable"):
        call_with_retries(Refusals(list(down)), _translate,
                          RetryPolicy(sleep=waits.append, hand_over_outages=True),
                          provider="p", model="m")
    assert waits == []
    assert call_with_retries(Refusals(list(down)), _translate,
                             RetryPolicy(sleep=waits.append, jitter=lambda: 0.0),
                             provider="p", model="m") == "ok"
    assert len(waits) == 1
    assert Failure("connect", refused=True).outage
    assert Failure("maximum context length", 400).overflow
    assert not Failure("bad request", 400).overflow


def test_an_interrupt_stops_a_blocked_model_call(echo_toolbox: Toolbox) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        entered.set()
        release.wait(30)  # a network read that never returns
        return text("too late")

    interrupt = Interrupt()
    threading.Thread(target=lambda: entered.wait(10) and interrupt.cancel("card cancelled"),
                     daemon=True).start()
    result = run_agent(ScriptedModel([stuck]), system="s", prompt="go", toolbox=echo_toolbox,
                       interrupt=interrupt)
    release.set()
    assert result.stop_reason is StopReason.INTERRUPTED
    assert result.error == "card cancelled" and not result.fatal


def test_an_interrupt_between_streamed_pieces() -> None:
    interrupt = Interrupt()

    class Streaming:
        name = "stream:test"

        def complete(self, messages: Any, tools: Any) -> ModelResponse:
            raise AssertionError("the loop streams when it can")

        def stream(self, messages: Any, tools: Any, on_event: Any) -> ModelResponse:
            from kanban.agent import TextDelta

            on_event(TextDelta("first"))
            interrupt.cancel("stop now")
            on_event(TextDelta("second"))  # the listener raises here
            raise AssertionError("not reached")

    result = run_agent(Streaming(), system="", prompt="go", toolbox=Toolbox([]),  # type: ignore[arg-type]
                       interrupt=interrupt)
    assert result.stop_reason is StopReason.INTERRUPTED and result.error == "stop now"
    with pytest.raises(Interrupted):
        interrupt.check()
