"""The provider-neutral agent loop: call the model, run its tool calls, repeat, within limits."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from agent.errors import FatalModelError, ModelError
from agent.hooks import AgentHooks
from agent.model import Model
from agent.types import Message, ModelResponse, Toolbox, ToolCall, ToolResult, ToolSpec, Usage

GRACE_PROMPT = (
    "You have reached the turn limit for this run. Do not call any tools. "
    "Reply with a short summary of what you did and what is left to do."
)
SKIPPED_TOOL_TEXT = "not run: the run's time limit was reached"


class StopReason(StrEnum):
    COMPLETED = "completed"
    TURN_LIMIT = "turn_limit"
    TOKEN_BUDGET = "token_budget"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Limits:
    """Bounds of one run: model calls with tools, input+output tokens, wall-clock seconds."""

    max_turns: int = 20
    token_budget: int | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class AgentResult:
    """How a run ended; `text` is the last assistant message's text."""

    text: str | None
    stop_reason: StopReason
    usage: Usage
    messages: list[Message]
    turns: int
    error: str | None = None
    fatal: bool = False


def run_agent(
    model: Model,
    *,
    system: str,
    prompt: str | list[Message],
    toolbox: Toolbox,
    limits: Limits = Limits(),
    hooks: AgentHooks | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> AgentResult:
    """Run one agent until it answers, a tool ends the run, a limit is hit or the model fails."""
    run = _Run(model, toolbox, limits, hooks or AgentHooks(), clock)
    run.start(system, prompt)
    try:
        return run.drive()
    except ModelError as exc:
        fatal = isinstance(exc, FatalModelError)
        return run.result(StopReason.ERROR, error=exc.message, fatal=fatal)


class _Run:
    """The state of one run; each method is one step of the loop."""

    def __init__(
        self,
        model: Model,
        toolbox: Toolbox,
        limits: Limits,
        hooks: AgentHooks,
        clock: Callable[[], float],
    ) -> None:
        self.model = model
        self.toolbox = toolbox
        self.limits = limits
        self.hooks = hooks
        self.clock = clock
        self.tools: tuple[ToolSpec, ...] = tuple(toolbox.specs())
        self.messages: list[Message] = []
        self.usage = Usage()
        self.turns = 0
        self.started = clock()

    def start(self, system: str, prompt: str | list[Message]) -> None:
        if system:
            self.append(Message("system", system))
        opening = [Message("user", prompt)] if isinstance(prompt, str) else prompt
        for message in opening:
            self.append(message)

    def drive(self) -> AgentResult:
        while True:
            stop = self.limit_reached()
            if stop is not None:
                return self.result(stop)
            if self.turns >= self.limits.max_turns:
                return self.grace_call()
            response = self.call_model()
            if response.tool_calls:
                stop = self.run_tools(response.tool_calls)
                if stop is not None:
                    return self.result(stop)
                continue
            follow_up = self.hooks.on_final_text(response.text or "")
            if follow_up is None:
                return self.result(StopReason.COMPLETED)
            self.append(Message("user", follow_up))

    def limit_reached(self) -> StopReason | None:
        if self.timed_out():
            return StopReason.TIMEOUT
        budget = self.limits.token_budget
        if budget is not None and self.usage.total_tokens >= budget:
            return StopReason.TOKEN_BUDGET
        return None

    def timed_out(self) -> bool:
        timeout = self.limits.timeout_s
        return timeout is not None and self.clock() - self.started >= timeout

    def grace_call(self) -> AgentResult:
        """Out of turns: one last call without tools so the model can summarise."""
        self.append(Message("user", GRACE_PROMPT))
        self.call_model(grace=True)
        return self.result(StopReason.TURN_LIMIT)

    def call_model(self, *, grace: bool = False) -> ModelResponse:
        response = self.model.complete(tuple(self.messages), () if grace else self.tools)
        self.turns += 1
        self.usage += response.usage
        self.hooks.on_usage(response.usage, self.model.name)
        # Tool calls in the grace call will never be run; keep them out of the transcript.
        calls = () if grace else response.tool_calls
        self.append(Message("assistant", response.text, tool_calls=calls))
        return replace(response, tool_calls=calls)

    def run_tools(self, calls: Sequence[ToolCall]) -> StopReason | None:
        """Answer every call in order; the run ends if one asks to or time runs out."""
        ends_run = False
        for index, call in enumerate(calls):
            if self.timed_out():
                self.skip_tools(calls[index:])
                return StopReason.COMPLETED if ends_run else StopReason.TIMEOUT
            result = self.call_tool(call)
            self.append_result(call, result)
            ends_run = ends_run or result.ends_run
        return StopReason.COMPLETED if ends_run else None

    def call_tool(self, call: ToolCall) -> ToolResult:
        try:
            result: ToolResult | str = self.toolbox.call(call)
        except Exception as exc:  # a toolbox must not raise; keep the run alive if one does
            return ToolResult(f"internal error in tool {call.name}: {exc!r}", is_error=True)
        return ToolResult(result) if isinstance(result, str) else result

    def skip_tools(self, calls: Sequence[ToolCall]) -> None:
        # Every tool call gets an answer, so the transcript stays valid for a later resume.
        for call in calls:
            self.append_result(call, ToolResult(SKIPPED_TOOL_TEXT, is_error=True))

    def append_result(self, call: ToolCall, result: ToolResult) -> None:
        self.append(
            Message(
                "tool",
                result.content,
                tool_call_id=call.id,
                name=call.name,
                is_error=result.is_error,
            )
        )

    def append(self, message: Message) -> None:
        self.messages.append(message)
        self.hooks.on_message(message)

    def result(
        self, stop: StopReason, *, error: str | None = None, fatal: bool = False
    ) -> AgentResult:
        last = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        return AgentResult(
            text=last.content if last else None,
            stop_reason=stop,
            usage=self.usage,
            messages=list(self.messages),
            turns=self.turns,
            error=error,
            fatal=fatal,
        )
