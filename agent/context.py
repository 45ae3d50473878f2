"""Keeping a conversation inside the model's context window.

Past a threshold of the window, the middle of the conversation is replaced by a summary
the model writes: the opening (system prompt and task) and the latest turns stay word for
word, and the cut never falls between a tool call and its results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kanban.agent.types import Message, ModelResponse, ToolSpec

SUMMARY_NAME = "context_summary"
SUMMARY_SYSTEM = (
    "You compress the working memory of an AI agent. Summarise the conversation excerpt "
    "you are given so the agent can carry on without it: decisions made, facts and results "
    "found (with exact names, paths, ids and numbers), what was tried and failed, and what "
    "is left to do. Write plain prose and lists, at most about 400 words. Do not call tools."
)
SUMMARY_PREFIX = "[Summary of the earlier part of this conversation, written to save space]\n"
CHARS_PER_TOKEN = 4.0
MESSAGE_CHARS_IN_SUMMARY_REQUEST = 4_000  # one message's share of the excerpt


@dataclass(frozen=True)
class ContextPolicy:
    """When and how to compress. `window`: tokens (None: from the model's name);
    `compress_at`: the share of the window past which the middle is summarised;
    `keep_recent`: the share of the window the latest turns may keep verbatim."""

    window: int | None = None
    compress_at: float = 0.5
    keep_recent: float = 0.25


class TokenGauge:
    """Estimates a request's size in tokens, calibrated by the sizes the provider reports."""

    def __init__(self) -> None:
        self.chars_per_token = CHARS_PER_TOKEN

    def calibrate(self, request_chars: int, input_tokens: int) -> None:
        if input_tokens > 0 and request_chars > 0:
            # Never assume denser than 2 or sparser than 8 characters per token.
            self.chars_per_token = min(8.0, max(2.0, request_chars / input_tokens))

    def tokens(self, chars: int) -> int:
        return int(chars / self.chars_per_token) + 1


def request_chars(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
    """The size of a request in characters (what the gauge converts to tokens)."""
    return sum(message_chars(m) for m in messages) + sum(
        len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)


def message_chars(message: Message) -> int:
    calls = sum(len(c.name) + len(c.arguments) + 16 for c in message.tool_calls)
    return len(message.content or "") + calls + 8


def split_points(messages: Sequence[Message], keep_chars: int) -> tuple[int, int] | None:
    """(end of the opening, start of the kept tail) or None when there is no middle.

    The opening is the leading system messages plus the first user message (the task).
    The tail holds the latest messages worth up to `keep_chars` (at least the last one)
    and starts on a message that is not a tool result, so every tool call keeps its results.
    """
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    if head < len(messages) and messages[head].role == "user":
        head += 1
    start, kept = len(messages), 0
    while start > head:
        size = message_chars(messages[start - 1])
        if kept + size > keep_chars and start < len(messages):
            break
        kept += size
        start -= 1
    while start < len(messages) and messages[start].role == "tool":
        start += 1  # a tail may not open with results whose call was summarised
    if start >= len(messages):
        # Only tool results are recent: keep from their call on, whatever it costs.
        start = len(messages)
        while start > head and messages[start - 1].role == "tool":
            start -= 1
        start = max(head, start - 1)
    return (head, start) if start - head >= 1 else None


def excerpt(messages: Sequence[Message], budget_chars: int) -> str:
    """The middle of a conversation as plain text for the summariser, within a budget."""
    per_message = max(200, min(MESSAGE_CHARS_IN_SUMMARY_REQUEST,
                               budget_chars // max(1, len(messages))))
    lines: list[str] = []
    for message in messages:
        body = message.content or ""
        if message.role == "assistant" and message.tool_calls:
            calls = "; ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
            body = f"{body}\n[calls: {calls}]".strip()
        if len(body) > per_message:
            body = f"{body[:per_message * 2 // 3]}\n[...]\n{body[-(per_message // 3):]}"
        label = message.role if message.name is None else f"{message.role} {message.name}"
        lines.append(f"## {label}\n{body}")
    return "\n\n".join(lines)


@dataclass(frozen=True)
class Compression:
    """A conversation with its middle summarised."""

    messages: list[Message]
    summary: Message
    replaced: int  # how many messages the summary stands for


def compress(
    messages: Sequence[Message],
    *,
    keep_chars: int,
    budget_chars: int,
    summarise: Callable[[list[Message]], ModelResponse],
) -> Compression | None:
    """The conversation with its middle summarised by `summarise`; None when there is no
    middle to summarise."""
    points = split_points(messages, keep_chars)
    if points is None:
        return None
    head, tail = points
    request = [
        Message("system", SUMMARY_SYSTEM),
        Message("user", "Summarise this part of the agent's conversation:\n\n"
                + excerpt(messages[head:tail], budget_chars)),
    ]
    response = summarise(request)
    summary = (response.text or "").strip() or "(the summariser returned nothing)"
    note = Message("user", SUMMARY_PREFIX + summary, name=SUMMARY_NAME)
    return Compression([*messages[:head], note, *messages[tail:]], note, tail - head)
