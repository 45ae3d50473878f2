"""The provider-neutral agent runtime: loop, model adapters, scripted model, retries.

Importing this package does not import the provider SDKs; `preload()` does, for a
forkserver that wants them warm before it forks workers.
"""

from __future__ import annotations

from collections.abc import Iterable

from kanban.agent.context import ContextPolicy
from kanban.agent.errors import (
    ContextOverflowError,
    FatalModelError,
    ModelError,
    OutageError,
    TransientModelError,
)
from kanban.agent.fallback import FallbackModel
from kanban.agent.hooks import AgentHooks
from kanban.agent.interrupt import Interrupt, Interrupted
from kanban.agent.limits import Limits, StopReason
from kanban.agent.loop import AgentResult, run_agent
from kanban.agent.model import Model, ModelOptions, resolve_chain, resolve_model
from kanban.agent.outputs import SavedOutputs
from kanban.agent.pricing import Price, PriceTable
from kanban.agent.retry import RetryPolicy
from kanban.agent.scripted import ScriptedModel, text, tool_call, tool_calls
from kanban.agent.scripts import register_script
from kanban.agent.types import (
    Message,
    ModelResponse,
    ReasoningData,
    ReasoningDelta,
    StreamEvent,
    StreamRestart,
    TextDelta,
    Toolbox,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    ToolSpec,
    Usage,
)
from kanban.agent.user_hooks import UserHooks, load_hooks

__all__ = [
    "AgentHooks",
    "AgentResult",
    "ContextOverflowError",
    "ContextPolicy",
    "FallbackModel",
    "FatalModelError",
    "Interrupt",
    "Interrupted",
    "Limits",
    "Message",
    "Model",
    "ModelError",
    "ModelOptions",
    "ModelResponse",
    "OutageError",
    "Price",
    "PriceTable",
    "ReasoningData",
    "ReasoningDelta",
    "RetryPolicy",
    "SavedOutputs",
    "ScriptedModel",
    "StopReason",
    "StreamEvent",
    "StreamRestart",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolResult",
    "ToolSpec",
    "Toolbox",
    "TransientModelError",
    "Usage",
    "UserHooks",
    "load_hooks",
    "preload",
    "register_script",
    "resolve_chain",
    "resolve_model",
    "run_agent",
    "text",
    "tool_call",
    "tool_calls",
]


def preload(providers: Iterable[str] = ("openai", "anthropic")) -> None:
    """Import SDKs and their adapters now, so forked workers start without paying for it."""
    wanted = set(providers)
    if wanted & {"openai", "openai-responses", "anthropic"}:
        from kanban.agent import tls
        from kanban.agent.warm import warm_up

        tls.context()  # shared by every client the forked workers make
        warm_up(sorted(wanted))  # the SDKs' lazy imports and models, built once here
