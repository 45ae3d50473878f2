"""Traces of agent runs (issue 32): the spans the loop opens for model and tool calls.

`NO_TRACE` answers every call with a no-op span, so a run without telemetry costs a method
call per model or tool call and never imports OpenTelemetry; kanban.agent.otel (the `otel`
extra) implements them, imported only when traces are wanted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kanban.agent.types import Message, ModelResponse, ToolCall, ToolResult, ToolSpec, Usage

Scrub = Callable[[str], str]  # takes credentials out of text before a span holds it


class ModelSpan:
    """One model call; this base records nothing."""

    def answered(self, response: ModelResponse) -> None:
        """The call returned `response`: the span ends."""

    def failed(self, error: BaseException) -> None:
        """The call raised: the span ends as an error."""


class ToolSpan:
    """One tool call; this base records nothing."""

    def answered(self, result: ToolResult) -> None:
        """The call was answered with `result` (as the model sees it): the span ends."""


def _unchanged(text: str) -> str:
    return text


NO_MODEL_SPAN = ModelSpan()
NO_TOOL_SPAN = ToolSpan()


class RunTrace:
    """One agent run's spans; this base is a run traced nowhere."""

    def __init__(self) -> None:
        self.traceparent: str | None = None  # W3C context of the run's span, for its children
        self.scrub: Scrub = _unchanged

    def keep_out(self, scrub: Scrub) -> None:
        """Pass every text a span would hold through `scrub` (which masks credentials)."""

    def model_call(self, model: str, messages: Sequence[Message],
                   tools: Sequence[ToolSpec]) -> ModelSpan:
        return NO_MODEL_SPAN

    def tool_call(self, call: ToolCall) -> ToolSpan:
        return NO_TOOL_SPAN

    def finished(self, stop_reason: str, usage: Usage, turns: int) -> None:
        """The agent loop ended (the run's span is ended by `end`)."""

    def end(self, outcome: str, *, error: bool) -> None:
        """The run is over, as the worker recorded it: the run's span ends."""


NO_TRACE = RunTrace()


@dataclass(frozen=True)
class TraceSettings:
    """Where spans go: an OTLP/HTTP traces URL and its headers; whether content is kept."""

    endpoint: str  # the full URL spans are posted to (…/v1/traces)
    headers: Mapping[str, str] = field(default_factory=dict)
    capture_content: bool = False
    service_name: str = "kanban"

