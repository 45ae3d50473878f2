"""ScriptedModel: an offline, deterministic model that replays scripted steps."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kanban.agent.types import (
    Message,
    ModelResponse,
    OnEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
)

Responder = Callable[[Sequence[Message], Sequence[ToolSpec]], ModelResponse]
Step = ModelResponse | Responder
FINISHED_TEXT = "(script finished)"


def text(content: str, *, reasoning: str | None = None) -> ModelResponse:
    """A step answering with text only (after some reasoning, if given)."""
    return ModelResponse(text=content, stop_reason="stop", reasoning=reasoning)


def tool_call(name: str, /, **arguments: Any) -> ModelResponse:
    """A step making one tool call with keyword arguments."""
    return tool_calls([(name, arguments)])


def tool_calls(
    calls: Iterable[tuple[str, Mapping[str, Any] | str]], text: str | None = None,
    *, reasoning: str | None = None,
) -> ModelResponse:
    """A step making several tool calls in one turn; a str argument is sent raw (malformed JSON).

    Ids are left empty: the model numbers them when the step is replayed.
    """
    return ModelResponse(
        text=text,
        tool_calls=tuple(ToolCall(id="", name=name, arguments=_raw(args)) for name, args in calls),
        stop_reason="tool_calls",
        reasoning=reasoning,
    )


def _raw(arguments: Mapping[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


@dataclass(frozen=True)
class ModelCall:
    """What one `complete` call was given."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]


class ScriptedModel:
    """Replays steps in order; once they run out it answers "(script finished)".

    A resumed conversation continues the script after the steps its stored answers came
    from (see `resume`)."""

    def __init__(self, steps: Iterable[Step] | None = None, name: str = "scripted:test", *,
                 interruptible: bool = False) -> None:
        self.name = name
        # True when no step can block but through `scripts.pause` (a JSON script's): its
        # calls then run on the run's own thread (kanban.agent.interrupt)
        self.interruptible = interruptible
        self.calls: list[ModelCall] = []
        self._steps: deque[Step] = deque(steps or ())
        self._resumed_at = 0  # answers already in a resumed conversation

    def resume(self, answers: int) -> None:
        """The conversation holds `answers` earlier answers of this script: skip them."""
        for _ in range(min(answers - self._resumed_at, len(self._steps))):
            self._steps.popleft()
        self._resumed_at = max(self._resumed_at, answers)

    def enqueue(self, *steps: Step) -> None:
        self._steps.extend(steps)

    @property
    def remaining(self) -> tuple[Step, ...]:
        return tuple(self._steps)

    def assert_consumed(self) -> None:
        """Raise AssertionError naming the steps that were never replayed."""
        if self._steps:
            left = ", ".join(describe_step(step) for step in self._steps)
            raise AssertionError(f"{self.name}: {len(self._steps)} step(s) not consumed: {left}")

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
               on_event: OnEvent) -> ModelResponse:
        """The next step, reported to `on_event` as a streaming model would."""
        response = self.complete(messages, tools)
        replay(response, on_event)
        return response

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        self.calls.append(ModelCall(tuple(messages), tuple(tools)))
        step = self._steps.popleft() if self._steps else text(FINISHED_TEXT)
        response = step if isinstance(step, ModelResponse) else step(messages, tools)
        if not isinstance(response, ModelResponse):
            raise TypeError(f"scripted step returned {type(response).__name__}, not ModelResponse")
        return self._finish(response, messages, tools)

    def _finish(
        self, response: ModelResponse, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        turn = self._resumed_at + len(self.calls)
        calls = tuple(
            call if call.id else replace(call, id=f"call_{turn}_{index}")
            for index, call in enumerate(response.tool_calls, start=1)
        )
        usage = response.usage
        if usage == Usage():
            usage = estimate_usage(messages, tools, response)
        return replace(response, tool_calls=calls, usage=usage, model=response.model or self.name,
                       source=self.name)


def replay(response: ModelResponse, on_event: OnEvent) -> None:
    """Tell a listener about a finished response, piece by piece."""
    if response.reasoning:
        on_event(ReasoningDelta(response.reasoning))
    if response.text:
        on_event(TextDelta(response.text))
    for index, call in enumerate(response.tool_calls):
        on_event(ToolCallDelta(index, call.name, call.arguments))


def estimate_usage(
    messages: Sequence[Message], tools: Sequence[ToolSpec], response: ModelResponse
) -> Usage:
    """About one token per four characters, deterministically."""
    sent = sum(_message_chars(m) for m in messages) + sum(
        len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools
    )
    received = len(response.text or "") + _calls_chars(response.tool_calls)
    return Usage(input_tokens=_tokens(sent), output_tokens=_tokens(received))


def _message_chars(message: Message) -> int:
    return len(message.content or "") + _calls_chars(message.tool_calls)


def _calls_chars(calls: Sequence[ToolCall]) -> int:
    return sum(len(call.name) + len(call.arguments) for call in calls)


def _tokens(chars: int) -> int:
    return -(-chars // 4)


def describe_step(step: Step) -> str:
    if not isinstance(step, ModelResponse):
        return f"callable {getattr(step, '__name__', repr(step))}"
    if step.tool_calls:
        return "tool_calls(" + ", ".join(call.name for call in step.tool_calls) + ")"
    return f"text({(step.text or '')[:40]!r})"


def resume_scripts(model: object, answers: int) -> None:
    """Tell every scripted model in `model` (maybe a fallback chain) that a stored
    conversation with `answers` answers is being continued."""
    for each in getattr(model, "models", [model]):
        if isinstance(each, ScriptedModel):
            each.resume(answers)
