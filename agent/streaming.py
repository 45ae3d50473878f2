"""Assembling a streamed answer, whatever the wire format, and telling a listener as it
arrives."""

from __future__ import annotations

from dataclasses import dataclass, field

from kanban.agent.types import (
    ModelResponse,
    OnEvent,
    ReasoningData,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)


def ignore(event: object) -> None:
    """The listener of a call nobody watches."""


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ReplyBuilder:
    """Collects text, reasoning and tool calls of one streamed answer, in arrival order."""

    def __init__(self, on_event: OnEvent = ignore) -> None:
        self.on_event = on_event
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _Call] = {}
        self.reasoning_blocks: list[dict[str, object]] = []

    def text(self, delta: str | None) -> None:
        if delta:
            self._text.append(delta)
            self.on_event(TextDelta(delta))

    def reasoning(self, delta: str | None) -> None:
        if delta:
            self._reasoning.append(delta)
            self.on_event(ReasoningDelta(delta))

    def call(self, index: int, *, id: str | None = None, name: str | None = None,
             arguments: str | None = None) -> None:
        """A piece of tool call `index`: its id, its name, or more of its arguments."""
        slot = self._calls.setdefault(index, _Call())
        if id:
            slot.id = id
        fresh_name = bool(name) and not slot.name
        if fresh_name:
            slot.name = name or ""
        if arguments:
            slot.arguments.append(arguments)
        if fresh_name or arguments:
            self.on_event(ToolCallDelta(index, name if fresh_name else None, arguments or ""))

    @property
    def chars(self) -> int:
        """How much was streamed so far (text, reasoning and arguments)."""
        return (sum(map(len, self._text)) + sum(map(len, self._reasoning))
                + sum(len(a) for c in self._calls.values() for a in c.arguments))

    def response(self, *, usage: Usage, stop_reason: str, model: str,
                 reasoning_wire: str | None = None) -> ModelResponse:
        calls = tuple(
            ToolCall(id=slot.id or f"call_{index}", name=slot.name,
                     arguments="".join(slot.arguments))
            for index, slot in sorted(self._calls.items()) if slot.name
        )
        blocks = tuple(self.reasoning_blocks)
        return ModelResponse(
            text="".join(self._text) or None,
            tool_calls=calls,
            usage=usage,
            stop_reason=stop_reason,
            model=model,
            reasoning="".join(self._reasoning) or None,
            reasoning_data=ReasoningData(reasoning_wire, blocks)
            if reasoning_wire and blocks else None,
        )
