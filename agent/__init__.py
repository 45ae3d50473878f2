"""The provider-neutral agent runtime: loop, model adapters, scripted model, retries.

Importing this package does not import the provider SDKs; `preload()` does, for a
forkserver that wants them warm before it forks workers.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.errors import FatalModelError, ModelError, TransientModelError
from agent.hooks import AgentHooks
from agent.loop import AgentResult, Limits, StopReason, run_agent
from agent.model import Model, resolve_model
from agent.retry import RetryPolicy
from agent.scripted import ScriptedModel, text, tool_call, tool_calls
from agent.scripts import register_script
from agent.types import Message, ModelResponse, Toolbox, ToolCall, ToolResult, ToolSpec, Usage

__all__ = [
    "AgentHooks",
    "AgentResult",
    "FatalModelError",
    "Limits",
    "Message",
    "Model",
    "ModelError",
    "ModelResponse",
    "RetryPolicy",
    "ScriptedModel",
    "StopReason",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Toolbox",
    "TransientModelError",
    "Usage",
    "preload",
    "register_script",
    "resolve_model",
    "run_agent",
    "text",
    "tool_call",
    "tool_calls",
]


def preload(providers: Iterable[str] = ("openai", "anthropic")) -> None:
    """Import SDKs and their adapters now, so forked workers start without paying for it."""
    wanted = set(providers)
    if "openai" in wanted:
        import agent.openai_model  # noqa: F401
    if "anthropic" in wanted:
        import agent.anthropic_model  # noqa: F401
