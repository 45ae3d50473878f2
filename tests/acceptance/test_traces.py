"""Traces across processes (issue 32): a lead's tree is one trace, exported by each worker
over real OTLP/HTTP to a local receiver."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import (
    LLMServer,
    Reply,
    called_tools,
    last_user_text,
    text_reply,
    tool_reply,
    tool_results,
)
from tests.support.otlp import OtlpReceiver, Span
from tests.support.procs import kanban, query, start_dispatcher, stop

GOAL = "Name two SQLite journal modes"


def _two_children(body: dict[str, Any]) -> Reply:
    """Lead: delegate two tasks, then answer from their results. Child: complete its card."""
    offered = [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]
    if "delegate" in offered:
        if "delegate" not in called_tools(body):
            tasks = [{"title": "alpha", "goal": "say wal"}, {"title": "beta", "goal": "say delete"}]
            return replace(tool_reply(("delegate", {"tasks": tasks})), usage=(50, 7, 0))
        children = json.loads(tool_results(body)[-1])["children"]
        return text_reply("ANSWER: " + "; ".join(c.get("summary", "?") for c in children),
                          usage=(80, 9, 0))
    if "kanban_complete" in called_tools(body):
        return text_reply("finished", usage=(30, 2, 0))
    title = re.search(r"Your card is #\d+: (.+)", last_user_text(body) or "")
    name = title.group(1).strip() if title else "unknown"
    return replace(tool_reply(("kanban_complete", {"summary": f"{name} says hi"})),
                   usage=(40, 5, 0))


def _without_otel(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("OTEL_")}


def _runs(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.attr("gen_ai.operation.name") == "invoke_agent"]


def _check_child_runs(spans: list[Span], kids: list[int], lead_span: Span) -> None:
    """Each child's run hangs under the lead's run, its model and tool calls under it."""
    runs = _runs(spans)
    for kid in kids:
        (run,) = [s for s in runs if s.attr("kanban.card.id") == kid]
        assert run.parent_id == lead_span.span_id  # the run that delegated
        assert run.name == "invoke_agent default" and run.attr("gen_ai.agent.name") == "default"
        calls = [s for s in spans if s.parent_id == run.span_id]
        chats = [s for s in calls if s.attr("gen_ai.operation.name") == "chat"]
        tools = [s for s in calls if s.attr("gen_ai.operation.name") == "execute_tool"]
        assert len(chats) == 1  # kanban_complete ends the run after its turn
        assert [s.attr("gen_ai.tool.name") for s in tools] == ["kanban_complete"]
        assert tools[0].name == "execute_tool kanban_complete" and tools[0].kind == 1
        (chat,) = chats
        assert chat.name == "chat test-model" and chat.kind == 3  # CLIENT
        assert chat.attr("gen_ai.request.model") == "test-model"
        assert chat.attr("gen_ai.usage.input_tokens") == 40
        assert chat.attr("gen_ai.usage.output_tokens") == 5
        assert chat.attr("gen_ai.response.finish_reasons") in (["tool_calls"], ["tool_use"])
        assert chat.start_time_ns <= tools[0].start_time_ns


def _card_ids(board: BoardFiles) -> tuple[int, list[int]]:
    lead_id = query(board.path, "SELECT id FROM card WHERE created_by = 'lead'")[0][0]
    kids = [row[0] for row in query(board.path, "SELECT id FROM card WHERE parent_id = ? "
                                                "ORDER BY id", lead_id)]
    assert len(kids) == 2
    return lead_id, kids


def test_a_lead_and_two_children_make_one_trace(board: BoardFiles) -> None:
    with LLMServer(responder=_two_children) as server, OtlpReceiver() as receiver:
        env = {**_without_otel(os.environ), **server.env(), **receiver.env()}
        out = kanban(board.path, "run", GOAL, "--model", "openai:test-model", env=env).stdout
        assert "ANSWER: alpha says hi; beta says hi" in out
        # the lead runs in `kanban run`, which waits for its children in its delegate call
        spans = receiver.wait_for(lambda got: len(_runs(got)) == 3, what="three run spans")
    lead_id, kids = _card_ids(board)
    assert len({s.trace_id for s in spans}) == 1  # one trace, over three processes
    (lead,) = [s for s in _runs(spans) if s.attr("kanban.card.id") == lead_id]
    assert lead.parent_id == "" and lead.service == "kanban"
    assert lead.name == "invoke_agent lead" and lead.attr("gen_ai.usage.input_tokens") == 130
    _check_child_runs(spans, kids, lead)
    chats = [s for s in spans if s.attr("gen_ai.operation.name") == "chat"]
    assert {s.attr("gen_ai.provider.name") for s in chats} == {"openai"}
    assert {s.attr("gen_ai.system") for s in chats} == {"openai"}
    (delegate,) = [s for s in spans if s.attr("gen_ai.tool.name") == "delegate"]
    assert delegate.parent_id == lead.span_id
    # content is opt-in: not one prompt, answer or argument went out
    keys = {key for s in spans for key in s.attributes}
    assert not {k for k in keys if k.endswith(("messages", "arguments", "result", "title"))}
    assert "say wal" not in json.dumps([s.attributes for s in spans])
    stored = dict(query(board.path, "SELECT id, traceparent FROM card"))
    assert all(tp and tp.split("-")[1] == lead.trace_id for tp in stored.values())


def test_a_lead_run_by_workers_keeps_its_resumed_run_in_the_trace(board: BoardFiles,
                                                                  tmp_path: Path) -> None:
    """A detached lead: a worker's run delegates and ends, the card waits, a later worker's
    run answers. Content is opted into by config.toml, which also says where spans go."""
    with LLMServer(responder=_two_children) as server, OtlpReceiver() as receiver:
        board.configure('[telemetry]\ncapture_content = true\nservice_name = "my-board"\n'
                        f'endpoint = "{receiver.url}"\n')
        env = {**_without_otel(os.environ), **server.env()}
        kanban(board.path, "run", GOAL, "--detach", "--model", "anthropic:test-model", env=env)
        dispatcher = start_dispatcher(board.path, env=env, log=tmp_path / "d.log")
        try:  # (a worker sends its spans as it exits: stopping before would kill it)
            spans = receiver.wait_for(lambda got: len(_runs(got)) == 4, what="four run spans",
                                      timeout=90)
        finally:
            stop(dispatcher)
    assert query(board.path, "SELECT status FROM card WHERE created_by = 'lead'") == [("done",)]
    lead_id, kids = _card_ids(board)
    assert len({s.trace_id for s in spans}) == 1 and {s.service for s in spans} == {"my-board"}
    first, resumed = sorted((s for s in _runs(spans) if s.attr("kanban.card.id") == lead_id),
                            key=lambda s: s.attr("kanban.run.id"))
    assert first.parent_id == "" and resumed.parent_id == first.span_id
    assert first.attr("kanban.card.title") == GOAL  # opted in
    _check_child_runs(spans, kids, first)
    chats = [s for s in spans if s.attr("gen_ai.operation.name") == "chat"]
    assert {s.attr("gen_ai.provider.name") for s in chats} == {"anthropic"}
    assert any("say wal" in (s.attr("gen_ai.input.messages") or "") for s in chats)
    assert any("says hi" in (s.attr("gen_ai.output.messages") or "") for s in chats)
    completes = [s for s in spans if s.attr("gen_ai.tool.name") == "kanban_complete"]
    assert all("says hi" in s.attr("gen_ai.tool.call.arguments") for s in completes)
