"""A run's bounds (turns, tokens, cost, time) and the warnings given as they near."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kanban.agent.tool_calls import DEFAULT_ARGUMENT_CHARS, DEFAULT_PARALLEL, DEFAULT_TOOL_CALLS

WARN_AT = (0.7, 0.9)


class StopReason(StrEnum):
    COMPLETED = "completed"
    TURN_LIMIT = "turn_limit"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    ERROR = "error"


@dataclass(frozen=True)
class Limits:
    """Bounds of one run: model calls with tools, input+output tokens, dollars, seconds.

    `spent_cost` is what earlier runs of the same card already cost, so `max_cost` holds
    per card; `max_parallel` bounds the tool calls of one turn that run at once. A turn's
    calls past `max_tool_calls`, and calls whose arguments pass `max_argument_chars`, are
    answered with an error instead of being run.
    """

    max_turns: int = 20
    token_budget: int | None = None
    timeout_s: float | None = None
    max_cost: float | None = None
    spent_cost: float = 0.0
    max_parallel: int = DEFAULT_PARALLEL
    max_tool_calls: int = DEFAULT_TOOL_CALLS
    max_argument_chars: int = DEFAULT_ARGUMENT_CHARS


@dataclass
class BudgetWarnings:
    """Says once per threshold (70%, 90%) and budget that the run should wrap up."""

    limits: Limits
    given: set[tuple[str, float]] = field(default_factory=set)
    last: dict[str, float] = field(default_factory=dict)  # tokens and cost at the last look

    def due(self, turns: int, tokens: int, cost: float) -> str | None:
        """The warning to attach to the next tool result, or None. Tokens and cost grow by
        leaps (each turn resends the conversation): a threshold the next turn would pass
        at the last turn's pace is warned of now, not after the leap."""
        notes: list[str] = []
        for budget, used, limit, unit in (
            ("turns", turns, self.limits.max_turns, "turns"),
            ("tokens", tokens, self.limits.token_budget, "tokens"),
            ("cost", cost, self.limits.max_cost, "dollars"),
        ):
            if not limit:
                continue
            before = self.last.get(budget, self.limits.spent_cost if budget == "cost" else 0)
            self.last[budget] = used
            ahead = used if budget == "turns" else used + max(0.0, used - before)
            crossed = [t for t in WARN_AT if ahead >= t * limit and (budget, t) not in self.given]
            if crossed:
                self.given.update((budget, t) for t in crossed)
                mark = max(crossed)
                share = (f"{int(mark * 100)}%" if used >= mark * limit else
                         f"{int(used / limit * 100)}%; the next turn may pass {int(mark * 100)}%")
                notes.append(f"{_amount(used, unit)} of {_amount(limit, unit)} {unit} used "
                             f"({share})")
        if not notes:
            return None
        return ("[budget warning: " + "; ".join(notes) + ". Finish the most important part "
                "now and wrap up: report your result before the budget runs out.]")


def _amount(value: float, unit: str) -> str:
    if unit == "dollars":
        return f"${value:.4f}"
    return f"{int(value):,}"
