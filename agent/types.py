"""Provider-neutral records exchanged between the loop, the models and the tools."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args, runtime_checkable

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(get_args(Role))


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model sent it; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(id=str(data["id"]), name=str(data["name"]), arguments=str(data["arguments"]))


@dataclass(frozen=True)
class Message:
    """One message of a conversation; `is_error` marks a tool result that reports a failure.

    An assistant message may carry the model's `reasoning` (readable thinking text) and
    `reasoning_data`: the provider's own reasoning blocks, tagged with the wire format that
    produced them, sent back only to that format. `model` names the model that answered.
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    reasoning: str | None = None
    reasoning_data: ReasoningData | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown message role {self.role!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form, used to store transcripts."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        if self.is_error:
            data["is_error"] = True
        if self.reasoning is not None:
            data["reasoning"] = self.reasoning
        if self.reasoning_data is not None:
            data["reasoning_data"] = self.reasoning_data.to_dict()
        if self.model is not None:
            data["model"] = self.model
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        raw_reasoning = data.get("reasoning_data")
        return cls(
            role=data["role"],
            content=data.get("content"),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            is_error=bool(data.get("is_error", False)),
            reasoning=data.get("reasoning"),
            reasoning_data=ReasoningData.from_dict(raw_reasoning) if raw_reasoning else None,
            model=data.get("model"),
        )


@dataclass(frozen=True)
class ReasoningData:
    """A provider's reasoning blocks as it sent them (signatures, encrypted content).

    `wire` is the format that made them ("anthropic", "openai-responses"); adapters of
    other formats drop them, so a conversation can move to another provider.
    """

    wire: str
    blocks: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"wire": self.wire, "blocks": list(self.blocks)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReasoningData:
        return cls(wire=str(data["wire"]), blocks=tuple(data.get("blocks") or ()))


@dataclass(frozen=True)
class Usage:
    """Token counts; `input_tokens` includes the cached ones (`cached_tokens`)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
        }


@dataclass(frozen=True)
class ModelResponse:
    """What one model call returned; `source` is the spec of the model that answered
    (`openai:gpt-4o`), `model` the name the provider reported."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    stop_reason: str = "stop"
    model: str = ""
    reasoning: str | None = None
    reasoning_data: ReasoningData | None = None
    source: str = ""


@dataclass(frozen=True)
class TextDelta:
    """Streamed answer text."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Streamed reasoning (thinking) text."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A tool call is being streamed: `index` within the turn, its name once known, and
    the argument text received with this event."""

    index: int
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class StreamRestart:
    """The call failed mid-stream and is tried again: forget what was streamed so far."""

    reason: str


StreamEvent = TextDelta | ReasoningDelta | ToolCallDelta | StreamRestart
OnEvent = Callable[[StreamEvent], None]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description and a JSON schema of its arguments.

    `parallel`: may run at the same time as other calls of the turn. `exclusive`: runs
    alone, after every other call of the turn (finishing a card, say). Adapters send
    neither flag to the model.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    parallel: bool = True
    exclusive: bool = False


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call; `ends_run` asks the loop to finish after this turn."""

    content: str
    is_error: bool = False
    ends_run: bool = False


class Toolbox(Protocol):
    """The tools one agent may call; `call` answers every call, failures included."""

    def specs(self) -> Sequence[ToolSpec]: ...

    def call(self, tool_call: ToolCall) -> ToolResult: ...


class StreamingModel(Protocol):
    """A model that can also report its answer while it arrives (see `Model`)."""

    name: str

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], on_event: OnEvent
    ) -> ModelResponse: ...


@runtime_checkable
class Model(Protocol):
    """Given messages and tool schemas, return text and/or tool calls, usage, a stop reason.

    A model that can stream also offers `stream(messages, tools, on_event)` (see
    `StreamingModel`): the same answer, reported piece by piece while it arrives.
    """

    @property
    def name(self) -> str:
        """The spec this model answers as (`openai:gpt-4o`)."""
        ...

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        ...
