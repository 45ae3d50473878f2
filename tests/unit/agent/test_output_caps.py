"""Bounded model output: a turn's calls past the cap and calls with oversized arguments get
error results the model can act on; what is stored of a message keeps head and tail."""

from __future__ import annotations

import json
from typing import Any

from kanban.agent import Limits, ScriptedModel, StopReason, run_agent, text, tool_calls
from kanban.textsafety import cut_middle
from kanban.tools.registry import Toolbox
from kanban.worker.transcript import TranscriptCaps
from tests.unit.agent.helpers import make_tool


def echo_box(ran: list[str]) -> Toolbox:
    def echo(args: dict[str, Any]) -> str:
        ran.append(args["s"])
        return f"echo {len(args['s'])}"

    return Toolbox([make_tool("echo", echo, properties={"s": {"type": "string"}})])


def test_calls_past_the_turn_cap_are_answered_with_an_error_and_not_run() -> None:
    ran: list[str] = []
    calls = tool_calls([("echo", {"s": str(n)}) for n in range(10)])
    result = run_agent(ScriptedModel([calls, text("ok")]), system="s", prompt="go",
                       toolbox=echo_box(ran), limits=Limits(max_tool_calls=3))
    assert result.stop_reason == StopReason.COMPLETED and ran == ["0", "1", "2"]
    answers = [m for m in result.messages if m.role == "tool"]
    assert len(answers) == 10 and all(m.is_error for m in answers[3:])
    assert "10 tool calls in one turn; at most 3" in (answers[3].content or "")


def test_an_oversized_argument_is_refused_and_not_kept() -> None:
    ran: list[str] = []
    big = "y" * 50_000
    calls = tool_calls([("echo", {"s": big}), ("echo", {"s": "small"})])
    result = run_agent(ScriptedModel([calls, text("ok")]), system="s", prompt="go",
                       toolbox=echo_box(ran), limits=Limits(max_argument_chars=10_000))
    assert ran == ["small"]
    refused = next(m for m in result.messages if m.role == "tool")
    assert refused.is_error and "too large (50,009 characters; the limit is 10,000)" in (
        refused.content or "")
    kept = json.loads(result.messages[2].tool_calls[0].arguments)
    assert "50,009 characters were not kept" in kept["cut"] and len(kept["head"]) == 1000


def test_a_stored_message_keeps_head_and_tail_and_says_how_long_it_was() -> None:
    caps = TranscriptCaps(message_chars=1_000)
    stored = caps.bound({"role": "tool", "content": "a" * 3000 + "z" * 3000,
                         "tool_calls": [{"id": "1", "name": "x", "arguments": "q" * 5000}]})
    assert len(stored["content"]) <= 1_000 and stored["content"].startswith("aaa")
    assert stored["content"].endswith("zzz") and "of 6,000 characters cut" in stored["content"]
    assert "5,000 characters" in json.loads(stored["tool_calls"][0]["arguments"])["cut"]
    assert cut_middle("short", 1_000) == "short"
