"""Budget warnings at 70% and 90%, the cost budget, and what runs cost."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kanban.agent import (
    Limits,
    ModelResponse,
    Price,
    PriceTable,
    ScriptedModel,
    StopReason,
    Usage,
    run_agent,
    text,
    tool_call,
)
from kanban.agent.limits import BudgetWarnings
from kanban.agent.pricing import DEFAULT_WINDOW, context_window
from kanban.tools.registry import Toolbox


def warnings_in(result: object) -> list[tuple[int, str]]:
    tool_results = [m.content or "" for m in result.messages if m.role == "tool"]  # type: ignore[attr-defined]
    return [(i + 1, c[c.index("[budget warning"):]) for i, c in enumerate(tool_results)
            if "[budget warning" in c]


def test_turn_warnings_at_70_and_90_percent(echo_toolbox: Toolbox) -> None:
    model = ScriptedModel([tool_call("echo", text=str(i)) for i in range(10)] + [text("done")])
    result = run_agent(model, system="s", prompt="go", toolbox=echo_toolbox,
                       limits=Limits(max_turns=10))
    warned = warnings_in(result)
    assert [turn for turn, _ in warned] == [7, 9]
    assert "7 of 10 turns used (70%)" in warned[0][1]
    assert "9 of 10 turns used (90%)" in warned[1][1]
    assert "wrap up" in warned[0][1]
    assert result.stop_reason is StopReason.TURN_LIMIT  # the grace call still comes


def test_cost_budget_stops_before_the_next_call(echo_toolbox: Toolbox) -> None:
    step = ModelResponse(None, tool_call("echo", text="a").tool_calls, Usage(100_000, 10_000))
    model = ScriptedModel([step] * 5 + [text("never")], name="openai:gpt-4o")
    model.name = "openai:gpt-4o"
    result = run_agent(model, system="s", prompt="go", toolbox=echo_toolbox,
                       limits=Limits(max_cost=1.0, spent_cost=0.2),
                       prices=PriceTable())
    # Each turn costs 0.25 + 0.10 dollars at gpt-4o's list price.
    assert result.cost == pytest.approx(0.35 * 3)
    assert result.stop_reason is StopReason.COST_BUDGET and result.turns == 3
    assert any("of $1.0000 dollars used" in w for _, w in warnings_in(result))


def test_a_run_on_a_model_without_a_price_is_not_said_to_be_free() -> None:
    model = ScriptedModel([ModelResponse("done", [], Usage(1_000, 10))], name="openai:x")
    model.name = "openai:mystery-model"  # no price known
    result = run_agent(model, system="s", prompt="go", toolbox=Toolbox([]),
                       prices=PriceTable())
    assert not result.priced and result.spent() == "cost unknown"
    assert replace(result, cost=0.25).spent() == "$0.2500 + unpriced calls"
    assert replace(result, cost=0.25, priced=True).spent() == "$0.2500"


def test_price_table_matches_families_and_overrides() -> None:
    table = PriceTable({"openai:gpt-4o": Price(1.0, 2.0), "my-local": Price(0.0, 0.0)})
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cached_tokens=400_000)
    assert table.cost(usage, "openai:gpt-4o-2024-08-06") == pytest.approx(3.0)  # override
    assert table.cost(usage, "openai:gpt-4o-mini") == pytest.approx(
        0.6 * 0.15 + 0.4 * 0.075 + 0.60)  # the longer built-in prefix wins
    assert table.cost(usage, "anthropic:claude-sonnet-4-5-20250929") == pytest.approx(
        0.6 * 3 + 0.4 * 0.3 + 15)
    assert table.cost(usage, "openai:my-local-llama") == 0.0
    assert table.cost(usage, "openai:mystery-model") is None
    assert table.cost(usage, "scripted:demo") == 0.0
    assert Price(2.0, 4.0).cost(Usage(10, 0, 10)) == pytest.approx(2e-5)  # no cached price


def test_context_windows() -> None:
    assert context_window("openai:gpt-4o-mini") == 128_000
    assert context_window("anthropic:claude-haiku-4-5") == 200_000
    assert context_window("openai-responses:gpt-5-mini") == 400_000
    assert context_window("openai:llama3") == DEFAULT_WINDOW
    assert context_window("openai:gpt-4o", override=8_192) == 8_192


def test_each_warning_is_given_once() -> None:
    warnings = BudgetWarnings(Limits(max_turns=10, token_budget=1000))
    assert warnings.due(5, 100, 0) is None
    both = warnings.due(9, 950, 0) or ""
    assert "9 of 10 turns used (90%)" in both and "950 of 1,000 tokens used (90%)" in both
    assert warnings.due(10, 990, 0) is None


def test_a_leap_past_a_threshold_is_warned_of_before_it() -> None:
    """Tokens grow by leaps: 400, then 600 (next turn at this pace: 800, past 70%), then
    the budget would be spent before a 90% warning at the old rule came."""
    warnings = BudgetWarnings(Limits(token_budget=1000))
    assert warnings.due(1, 300, 0) is None  # the next turn at this pace: 600
    early = warnings.due(2, 600, 0) or ""
    assert "600 of 1,000 tokens used (60%; the next turn may pass 90%)" in early
    assert warnings.due(3, 950, 0) is None  # each warning once
