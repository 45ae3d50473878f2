"""What the faces show of the agent runtime: live activity, cost, reasoning, models."""

from __future__ import annotations

from kanban import claims, run_activity
from kanban.activity import describe, money, short_number
from kanban.service import Kanban
from tests.unit.cli.conftest import Cli

ACTIVITY = {"phase": "tools", "turn": 3, "max_turns": 20, "model": "openai:gpt-4o",
            "tools": ["terminal"], "tokens": 12_345, "cost": 0.0123}


def running_card(cli: Cli, kanban: Kanban) -> claims.Claim:
    cli.add("busy card")
    [claim] = kanban.claim(1, lease_s=30)
    with kanban.db.write() as conn:
        run_activity.record_activity(conn, claim.run_id, claim.card_id, claim.claim_token, ACTIVITY,
                               now=kanban.clock())
    return claim


def test_activity_in_words() -> None:
    assert describe(ACTIVITY) == "running terminal · turn 3/20 · 12.3k tokens · $0.0123"
    assert describe(ACTIVITY, compact=True) == "terminal · t3/20 · 12.3k · $0.0123"
    thinking = {"phase": "thinking", "turn": 1, "model": "anthropic:claude"}
    assert describe(thinking) == "thinking (anthropic:claude) · turn 1"
    assert describe(None) == "" and describe("not json") == ""
    assert (short_number(999), short_number(2_500_000), money(None), money(0), money(12.5)) == (
        "999", "2.5M", "-", "$0", "$12.50")


def test_board_show_and_workers_show_what_a_worker_is_doing(cli: Cli, kanban: Kanban) -> None:
    running_card(cli, kanban)
    wide = {"COLUMNS": "200"}
    assert "▸ terminal · t3/20 · 12.3k · $0.0123" in cli("board", env=wide).stdout
    board = cli.json("board")
    assert board["columns"]["running"][0]["activity"]["tools"] == ["terminal"]
    shown = cli("show", "1", env=wide).stdout
    assert "running terminal · turn 3/20" in shown
    assert cli.json("show", "1")["runs"][0]["activity"]["turn"] == 3
    assert "terminal · t3/20" in cli("workers", env=wide).stdout
    assert cli.json("workers")["workers"][0]["activity"]["cost"] == 0.0123


def test_cost_and_reasoning_in_show_and_log(cli: Cli, kanban: Kanban) -> None:
    claim = running_card(cli, kanban)
    now = kanban.clock()
    with kanban.db.write() as conn:
        claims.append_message(conn, claim.run_id, 1, {"role": "user", "content": "go"}, now=now)
        claims.append_message(conn, claim.run_id, 2, {
            "role": "assistant", "content": "the answer", "reasoning": "a long chain of thought",
            "model": "anthropic:claude-sonnet-4-5",
            "reasoning_data": {"wire": "anthropic", "blocks": [{"type": "thinking"}]}}, now=now)
        claims.append_message(conn, claim.run_id, 3, {
            "role": "tool", "content": "no such file", "tool_call_id": "c", "name": "read",
            "is_error": True}, now=now)
        claims.record_usage(conn, claim.run_id, claim.card_id, "anthropic:claude-sonnet-4-5",
                            input_tokens=1000, output_tokens=100, cached_tokens=0, now=now,
                            cost=0.0045)
        claims.record_usage(conn, claim.run_id, claim.card_id, "openai:mystery",
                            input_tokens=10, output_tokens=1, cached_tokens=0, now=now,
                            cost=None)
    wide = {"COLUMNS": "200"}
    shown = cli("show", "1", env=wide).stdout  # the card's facts and its run's line
    assert shown.count("cost $0.0045 (+1 unpriced call)") == 2, shown  # not counted as free
    assert cli.json("show", "1")["card"]["cost"] == 0.0045
    assert cli.json("show", "1")["runs"][0]["unpriced_calls"] == 1
    brief = cli("log", "1", env=wide).stdout
    assert "assistant (anthropic:claude-sonnet-4-5): " in brief
    assert "[reasoning: 23 characters; --reasoning shows it]" in brief
    assert "a long chain of thought" not in brief
    assert "cost $0.0045 (+1 unpriced call) ──" in brief
    full = cli("log", "1", "--reasoning", env=wide).stdout
    assert "a long chain of thought" in full
    log = cli.json("log", "1")
    [run] = log["runs"]
    assert run["cost"] == 0.0045 and run["unpriced_calls"] == 1
    user, answer, result = run["messages"]
    assert answer["reasoning"] == "a long chain of thought"
    assert answer["model"] == "anthropic:claude-sonnet-4-5" and not answer["is_error"]
    assert result["is_error"] is True and "data" not in result


def test_a_run_of_unpriced_calls_only_costs_unknown_not_nothing(cli: Cli,
                                                                kanban: Kanban) -> None:
    """A local model, or one whose price kanban does not know: "$0" would say it was free."""
    claim = running_card(cli, kanban)
    with kanban.db.write() as conn:
        for _ in range(2):
            claims.record_usage(conn, claim.run_id, claim.card_id, "openai:local-llama",
                                input_tokens=10, output_tokens=1, cached_tokens=0,
                                now=kanban.clock(), cost=None)
    wide = {"COLUMNS": "200"}
    shown = cli("show", "1", env=wide).stdout
    assert shown.count("cost unknown (2 unpriced calls)") == 2, shown
    assert "cost $0 " not in shown and "cost $0\n" not in shown
    assert "cost unknown (2 unpriced calls) ──" in cli("log", "1", env=wide).stdout
