"""Provider-neutral records exchanged between the loop, the models and the tools."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

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
    """One message of a conversation; `is_error` marks a tool result that reports a failure."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False

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
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content"),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            is_error=bool(data.get("is_error", False)),
        )


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
    """What one model call returned."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    stop_reason: str = "stop"
    model: str = ""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


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
