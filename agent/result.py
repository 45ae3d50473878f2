"""What a run of the agent loop returns: below the loop and its hooks, which both speak of it."""

from __future__ import annotations

from dataclasses import dataclass

from kanban.agent.limits import StopReason
from kanban.agent.types import Message, Usage


@dataclass(frozen=True)
class AgentResult:
    """How a run ended; `text` is the last assistant message's text, `cost` its dollars
    (`priced` False when some model's price was unknown)."""

    text: str | None
    stop_reason: StopReason
    usage: Usage
    messages: list[Message]
    turns: int
    error: str | None = None
    fatal: bool = False
    cost: float = 0.0
    priced: bool = True
    compressions: int = 0

    def spent(self) -> str:
        """The run's dollars as the worker's log says them: an unknown price is not $0."""
        if self.priced:
            return f"${self.cost:.4f}"
        return f"${self.cost:.4f} + unpriced calls" if self.cost else "cost unknown"
