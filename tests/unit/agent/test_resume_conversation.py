"""The conversation a resumed card continues: every tool call answered."""

from __future__ import annotations

import json

from kanban.agent.types import Message, ToolCall
from kanban.worker.resume import DIED, RESUMED, answer_every_call


def _turn(*calls: tuple[str, str]) -> Message:
    return Message("assistant", "working", tool_calls=tuple(
        ToolCall(cid, name, "{}") for cid, name in calls))


def test_every_unanswered_call_gets_an_error_result_in_its_turn() -> None:
    convo = [Message("system", "s"), Message("user", "go"),
             _turn(("a", "terminal"), ("b", "read_file")),
             Message("tool", "ok", tool_call_id="a", name="terminal")]
    out = answer_every_call(convo, None, None)
    assert [(m.role, m.tool_call_id) for m in out][2:] == [
        ("assistant", None), ("tool", "a"), ("tool", "b")]
    assert out[-1].is_error and out[-1].content == DIED and out[-1].name == "read_file"


def test_the_delegate_result_becomes_the_childrens_report() -> None:
    convo = [Message("user", "go"), _turn(("d", "delegate")),
             Message("tool", "delegated; this run ends now", tool_call_id="d", name="delegate")]
    report = json.dumps({"children": [{"id": 2, "status": "done", "summary": "x"}]})
    out = answer_every_call(convo, "d", report)
    assert out[-1].content == report and not out[-1].is_error
    unrecorded = answer_every_call(convo[:2], "d", report)  # the placeholder never stored
    assert unrecorded[-1].content == report


def test_a_conversation_ending_with_the_model_gets_a_note_to_go_on() -> None:
    out = answer_every_call([Message("user", "go"), Message("assistant", "thinking")], None,
                            None)
    assert out[-1] == Message("user", RESUMED)
