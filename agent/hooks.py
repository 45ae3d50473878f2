"""Callbacks the loop makes while it runs; subclass and override what you need."""

from __future__ import annotations

from agent.types import Message, Usage


class AgentHooks:
    """No-op hooks: the worker overrides them to store the transcript and usage.

    An exception raised by a hook is not caught: it ends `run_agent` (e.g. a lost lease).
    """

    def on_message(self, message: Message) -> None:
        """Called for every message appended to the conversation, in order."""

    def on_usage(self, usage: Usage, model_name: str) -> None:
        """Called after every model call with that call's usage."""

    def on_final_text(self, text: str) -> str | None:
        """Called when the model answers with text only; a string is sent back as a user
        message and the loop goes on, None finishes the run as completed."""
        return None
