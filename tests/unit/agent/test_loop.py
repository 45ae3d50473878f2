"""The agent loop: every stop reason, tool turns, hooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kanban.agent import (
    AgentHooks,
    FatalModelError,
    Limits,
    Message,
    ModelResponse,
    ScriptedModel,
    StopReason,
    ToolCall,
    ToolResult,
    ToolSpec,
    TransientModelError,
    Usage,
    run_agent,
    text,
    tool_call,
    tool_calls,
)
from kanban.agent.loop import GRACE_PROMPT, SKIPPED_TOOL_TEXT
from kanban.tools.registry import Toolbox
from tests.unit.agent.helpers import FakeClock, make_tool


def run(model: ScriptedModel, toolbox: Toolbox, **kwargs: object):
    return run_agent(model, system="be brief", prompt="do it", toolbox=toolbox, **kwargs)


def test_text_answer_completes(echo_toolbox: Toolbox) -> None:
    model = ScriptedModel([text("all done")])
    result = run(model, echo_toolbox)
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "all done"
    assert result.turns == 1
    assert [m.role for m in result.messages] == ["system", "user", "assistant"]
    assert result.error is None and not result.fatal
    model.assert_consumed()


def test_tool_calls_run_in_order_and_results_go_back(echo_toolbox: Toolbox) -> None:
    model = ScriptedModel(
        [tool_calls([("echo", {"text": "one"}), ("add", {"a": 2, "b": 3})]), text("ok")]
    )
    result = run(model, echo_toolbox)
    tool_messages = [m for m in result.messages if m.role == "tool"]
    assert [m.content for m in tool_messages] == ['{"echo": "one"}', "5"]
    assistant = result.messages[2]
    assert [m.tool_call_id for m in tool_messages] == [c.id for c in assistant.tool_calls]
    assert [m.name for m in tool_messages] == ["echo", "add"]
    # the second model call saw the results
    assert model.calls[1].messages[-1].content == "5"
    assert [spec.name for spec in model.calls[0].tools] == ["echo", "add"]
    assert result.turns == 2 and result.stop_reason is StopReason.COMPLETED


def test_bad_tool_call_becomes_an_error_result_and_the_run_goes_on(
    echo_toolbox: Toolbox,
) -> None:
    model = ScriptedModel([tool_calls([("echo", "{broken"), ("nope", {})]), text("sorry")])
    result = run(model, echo_toolbox)
    errors = [m for m in result.messages if m.role == "tool"]
    assert all(m.is_error for m in errors)
    assert "not valid JSON" in (errors[0].content or "")
    assert "unknown tool 'nope'" in (errors[1].content or "")
    assert result.stop_reason is StopReason.COMPLETED and result.text == "sorry"


def test_turn_limit_makes_one_grace_call_without_tools(echo_toolbox: Toolbox) -> None:
    looping = [tool_call("echo", text=str(i)) for i in range(3)]
    model = ScriptedModel([*looping, tool_call("echo", text="ignored"), text("unused")])
    result = run(model, echo_toolbox, limits=Limits(max_turns=3))
    assert result.stop_reason is StopReason.TURN_LIMIT
    assert result.turns == 4
    grace = model.calls[-1]
    assert grace.tools == ()
    assert grace.messages[-1] == Message("user", GRACE_PROMPT)
    # tool calls made in the grace call are dropped, never run
    assert result.messages[-1].role == "assistant" and result.messages[-1].tool_calls == ()
    assert model.remaining == (text("unused"),)


def test_grace_call_text_is_the_result_text(echo_toolbox: Toolbox) -> None:
    model = ScriptedModel([tool_call("echo", text="x"), text("summary: echoed x")])
    result = run(model, echo_toolbox, limits=Limits(max_turns=1))
    assert result.stop_reason is StopReason.TURN_LIMIT
    assert result.text == "summary: echoed x"


def test_token_budget_stops_before_the_next_call(echo_toolbox: Toolbox) -> None:
    costly = ModelResponse(None, tool_call("echo", text="a").tool_calls, Usage(80, 30))
    model = ScriptedModel([costly, text("never")])
    result = run(model, echo_toolbox, limits=Limits(token_budget=100))
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.usage == Usage(80, 30)
    assert result.turns == 1
    assert result.messages[-1].role == "tool"  # the turn's calls were still answered
    assert len(model.remaining) == 1


def test_token_budget_counts_running_totals(echo_toolbox: Toolbox) -> None:
    step = ModelResponse(None, tool_call("echo", text="a").tool_calls, Usage(30, 10))
    model = ScriptedModel([step, step, step, text("never")])
    result = run(model, echo_toolbox, limits=Limits(token_budget=100))
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.turns == 3 and result.usage.total_tokens == 120


def test_timeout_between_model_calls(echo_toolbox: Toolbox, clock: FakeClock) -> None:
    def slow_step(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        clock.advance(31)
        return tool_call("echo", text="slow")

    model = ScriptedModel([slow_step, text("never")])
    result = run(model, echo_toolbox, limits=Limits(timeout_s=30), clock=clock)
    assert result.stop_reason is StopReason.TIMEOUT
    assert result.turns == 1
    # the turn's one tool call was skipped, but still answered in the transcript
    assert result.messages[-1].content == SKIPPED_TOOL_TEXT and result.messages[-1].is_error


def test_timeout_between_tool_calls(clock: FakeClock) -> None:
    ran: list[str] = []

    def slow_tool(args: dict) -> str:
        ran.append(args["text"])
        clock.advance(20)
        return "ok"

    # A tool that may not run in parallel: its calls run one by one, time checked between.
    work = replace(make_tool("work", slow_tool, properties={"text": {"type": "string"}}),
                   parallel=False)
    toolbox = Toolbox([work])
    calls = tool_calls([("work", {"text": "1"}), ("work", {"text": "2"}), ("work", {"text": "3"})])
    model = ScriptedModel([calls, text("never")])
    result = run(model, toolbox, limits=Limits(timeout_s=30), clock=clock)
    assert result.stop_reason is StopReason.TIMEOUT
    assert ran == ["1", "2"]
    results = [m.content for m in result.messages if m.role == "tool"]
    assert results == ["ok", "ok", SKIPPED_TOOL_TEXT]


def test_no_timeout_when_within_limits(echo_toolbox: Toolbox, clock: FakeClock) -> None:
    model = ScriptedModel([tool_call("echo", text="x"), text("done")])
    result = run(model, echo_toolbox, limits=Limits(timeout_s=30), clock=clock)
    assert result.stop_reason is StopReason.COMPLETED


class FailingModel:
    name = "failing:test"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        raise self.error


def test_fatal_model_error_stops_with_error(echo_toolbox: Toolbox) -> None:
    result = run(FailingModel(FatalModelError("openai: authentication failed")), echo_toolbox)
    assert result.stop_reason is StopReason.ERROR
    assert result.fatal is True
    assert result.error == "openai: authentication failed"
    assert result.turns == 0 and result.text is None


def test_transient_model_error_stops_with_error_not_fatal(echo_toolbox: Toolbox) -> None:
    result = run(FailingModel(TransientModelError("openai: still 429")), echo_toolbox)
    assert result.stop_reason is StopReason.ERROR
    assert result.fatal is False
    assert result.error == "openai: still 429"


def test_a_tool_can_end_the_run_after_its_turn() -> None:
    finished: list[str] = []
    complete = make_tool(
        "complete", lambda args: ToolResult("card done", ends_run=True)
    )
    note = make_tool("note", lambda args: finished.append("note") or "noted")
    model = ScriptedModel(
        [tool_calls([("complete", {}), ("note", {})], text="finishing"), text("never")]
    )
    result = run(model, Toolbox([complete, note]))
    assert result.stop_reason is StopReason.COMPLETED
    assert finished == ["note"]  # the rest of the turn still ran
    assert [m.content for m in result.messages if m.role == "tool"] == ["card done", "noted"]
    assert result.text == "finishing"
    assert len(model.remaining) == 1


class RecordingHooks(AgentHooks):
    def __init__(self, reminders: list[str]) -> None:
        self.messages: list[Message] = []
        self.usages: list[tuple[Usage, str, float | None]] = []
        self.final_texts: list[str] = []
        self.reminders = reminders

    def on_message(self, message: Message) -> None:
        self.messages.append(message)

    def on_usage(self, usage: Usage, model_name: str, cost: float | None = None) -> None:
        self.usages.append((usage, model_name, cost))

    def on_final_text(self, text: str) -> str | None:
        self.final_texts.append(text)
        return self.reminders.pop(0) if self.reminders else None


def test_hooks_see_every_message_and_usage(echo_toolbox: Toolbox) -> None:
    hooks = RecordingHooks([])
    model = ScriptedModel([tool_call("echo", text="x"), text("done")], name="scripted:hooks")
    result = run(model, echo_toolbox, hooks=hooks)
    assert hooks.messages == result.messages
    assert [name for _, name, _ in hooks.usages] == ["scripted:hooks", "scripted:hooks"]
    assert [cost for _, _, cost in hooks.usages] == [0.0, 0.0]  # scripted models are free
    assert sum((u for u, _, _ in hooks.usages), Usage()) == result.usage
    assert hooks.final_texts == ["done"]


def test_on_final_text_can_send_one_reminder(echo_toolbox: Toolbox) -> None:
    hooks = RecordingHooks(["Call kanban_complete or kanban_block."])
    model = ScriptedModel([text("I think I'm done"), text("Still just text")])
    result = run(model, echo_toolbox, hooks=hooks)
    assert result.stop_reason is StopReason.COMPLETED
    assert hooks.final_texts == ["I think I'm done", "Still just text"]
    assert model.calls[1].messages[-1] == Message("user", "Call kanban_complete or kanban_block.")
    assert result.text == "Still just text" and result.turns == 2


def test_prompt_may_be_a_conversation(echo_toolbox: Toolbox) -> None:
    earlier = [Message("user", "first"), Message("assistant", "noted"), Message("user", "go")]
    model = ScriptedModel([text("went")])
    result = run_agent(model, system="", prompt=earlier, toolbox=echo_toolbox)
    assert list(model.calls[0].messages) == earlier  # no system message when it is empty
    assert result.messages[-1] == Message("assistant", "went", model="scripted:test")


class RaisingToolbox:
    def specs(self) -> list[ToolSpec]:
        return [ToolSpec("boom", "explodes", {"type": "object"})]

    def call(self, call: ToolCall) -> ToolResult:
        raise RuntimeError("toolbox bug")


def test_a_raising_toolbox_does_not_crash_the_loop() -> None:
    model = ScriptedModel([tool_call("boom"), text("recovered")])
    result = run(model, RaisingToolbox())  # type: ignore[arg-type]
    tool_message = result.messages[-2]
    assert tool_message.is_error and "toolbox bug" in (tool_message.content or "")
    assert result.stop_reason is StopReason.COMPLETED


def test_plain_string_results_from_a_toolbox_are_accepted() -> None:
    class StringToolbox:
        def specs(self) -> list[ToolSpec]:
            return []

        def call(self, call: ToolCall) -> str:
            return "plain"

    model = ScriptedModel([tool_call("anything"), text("ok")])
    result = run(model, StringToolbox())  # type: ignore[arg-type]
    assert result.messages[-2] == Message(
        "tool", "plain", tool_call_id=result.messages[-3].tool_calls[0].id, name="anything"
    )
