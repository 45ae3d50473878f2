"""Callbacks the loop makes while it runs; subclass and override what you need.

These are how an embedder (the worker) stores and shows a run. Users' own hooks
(`pre_tool`, `post_tool`, `on_turn`, `on_finish` from config) are `UserHooks`.
"""

from __future__ import annotations

from kanban.agent.result import AgentResult
from kanban.agent.types import Message, StreamEvent, ToolCall, ToolResult, Usage


class AgentHooks:
    """No-op hooks: the worker overrides them to store the transcript, usage and progress.

    An exception raised by a hook is not caught: it ends `run_agent` (e.g. a lost lease).
    `on_event`, `on_tool_start` and `on_tool_end` may be called from other threads.
    """

    def on_message(self, message: Message) -> None:
        """Called for every message appended to the conversation, in order."""

    def on_usage(self, usage: Usage, model_name: str, cost: float | None = None) -> None:
        """Called after every model call with its usage and cost (None: price unknown)."""

    def on_final_text(self, text: str) -> str | None:
        """Called when the model answers with text only; a string is sent back as a user
        message and the loop goes on, None finishes the run as completed."""
        return None

    def on_model_start(self, turn: int, model_name: str) -> None:
        """A model call is about to be made for `turn` (1-based)."""

    def on_model_end(self, turn: int) -> None:
        """The model's answer for `turn` was appended to the conversation (a commit point:
        its tool calls have not run yet)."""

    def on_event(self, event: StreamEvent) -> None:
        """A piece of the answer arrived (text, reasoning, a tool call); model-call thread."""

    def on_tool_start(self, call: ToolCall) -> None:
        """A tool call starts running (on a tool thread when calls run in parallel)."""

    def on_tool_end(self, call: ToolCall, result: ToolResult) -> None:
        """A tool call finished with `result` (as the model will see it)."""

    def on_turn_end(self, turn: int) -> None:
        """A turn is complete: its messages and usage were reported. A good commit point."""

    def on_fallback(self, old_model: str, new_model: str, reason: str) -> None:
        """The conversation moved to the next model of the fallback chain."""

    def on_compress(self, summary: Message, replaced: int, tokens_before: int) -> None:
        """`replaced` messages of the middle were summarised into `summary` (which is also
        reported through `on_message`)."""

    def on_hook_error(self, hook: str, message: str) -> None:
        """A user hook raised; the run goes on without it."""

    def on_finish(self, result: AgentResult) -> None:
        """The run ended (also after errors); called last."""
