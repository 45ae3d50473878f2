"""Spans of an agent run (issue 32): GenAI attributes, nesting, content only on opt-in."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from kanban.agent import ModelResponse, ScriptedModel, ToolCall, Usage, run_agent, text
from kanban.agent.otel import OtelTracing
from kanban.tools.registry import Toolbox
from tests.unit.agent.helpers import make_tool

SECRET = "sk-test-0123456789abcdef"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


def tracing(exporter: InMemorySpanExporter, *, capture: bool = False) -> OtelTracing:
    return OtelTracing(exporter, capture_content=capture, batch=False)


def two_calls() -> ScriptedModel:
    """One turn with two parallel tool calls, then an answer; usage on both turns."""
    calls = (ToolCall("c1", "echo", json.dumps({"text": "first words"})),
             ToolCall("c2", "echo", json.dumps({"text": f"key {SECRET}"})))
    return ScriptedModel([
        ModelResponse(None, calls, Usage(120, 30), "tool_calls", model="gpt-x-2025"),
        ModelResponse("all done", (), Usage(200, 10), "stop", model="gpt-x-2025"),
    ], name="openai:gpt-x")


def echo_box() -> Toolbox:
    seen: list[str] = []

    def echo(args: dict[str, str]) -> str:
        seen.append(threading.current_thread().name)
        return f"echo: {args['text']}"

    return Toolbox([make_tool("echo", echo, properties={"text": {"type": "string"}})])


def traced_run(exporter: InMemorySpanExporter, *, capture: bool = False,
               prompt: str = "say the secret words") -> list[ReadableSpan]:
    tracer = tracing(exporter, capture=capture)
    run = tracer.run("invoke_agent default", {"gen_ai.operation.name": "invoke_agent"},
                     parent=None)
    run.keep_out(lambda text: text.replace(SECRET, "[redacted]"))
    run_agent(two_calls(), system="be brief", prompt=prompt, toolbox=echo_box(), trace=run)
    run.end("completed", error=False)
    tracer.shutdown()
    return list(exporter.get_finished_spans())


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def test_model_and_tool_calls_are_children_of_the_run_with_genai_attributes(
        exporter: InMemorySpanExporter) -> None:
    spans = traced_run(exporter)
    (run,) = by_name(spans, "invoke_agent")
    chats, tools = by_name(spans, "chat "), by_name(spans, "execute_tool ")
    assert len(chats) == 2 and len(tools) == 2
    assert run.parent is None
    for span in chats + tools:  # tools ran on the executor's threads: still the run's
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.context.trace_id == run.context.trace_id
    first = min(chats, key=lambda s: s.start_time or 0)
    assert first.name == "chat gpt-x" and first.kind == SpanKind.CLIENT
    assert first.attributes is not None
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.provider.name"] == "openai"
    assert first.attributes["gen_ai.system"] == "openai"
    assert first.attributes["gen_ai.request.model"] == "gpt-x"
    assert first.attributes["gen_ai.response.model"] == "gpt-x-2025"
    assert first.attributes["gen_ai.usage.input_tokens"] == 120
    assert first.attributes["gen_ai.usage.output_tokens"] == 30
    assert tuple(first.attributes["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    tool = tools[0]
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "echo"
    assert {t.attributes["gen_ai.tool.call.id"] for t in tools if t.attributes} == {"c1", "c2"}
    assert run.attributes is not None
    assert run.attributes["gen_ai.usage.input_tokens"] == 320  # the run's totals
    assert run.attributes["kanban.stop_reason"] == "completed"


def test_no_content_in_spans_unless_opted_in(exporter: InMemorySpanExporter) -> None:
    spans = traced_run(exporter)
    dumped = json.dumps([dict(s.attributes or {}) for s in spans])
    for words in ("first words", "say the secret words", "all done", "be brief", SECRET):
        assert words not in dumped
    assert not any(key.endswith(("messages", "arguments", "result", "instructions"))
                   for s in spans for key in (s.attributes or {}))


def test_opted_in_content_is_kept_without_credentials(exporter: InMemorySpanExporter) -> None:
    spans = traced_run(exporter, capture=True, prompt=f"use {SECRET} wisely")
    chat = min(by_name(spans, "chat "), key=lambda s: s.start_time or 0)
    last = max(by_name(spans, "chat "), key=lambda s: s.start_time or 0)
    assert chat.attributes is not None and last.attributes is not None
    sent = json.loads(str(chat.attributes["gen_ai.input.messages"]))
    assert sent[0]["role"] == "user" and "wisely" in sent[0]["parts"][0]["content"]
    assert "be brief" in str(chat.attributes["gen_ai.system_instructions"])
    assert "all done" in str(last.attributes["gen_ai.output.messages"])
    args = {str((t.attributes or {})["gen_ai.tool.call.arguments"])
            for t in by_name(spans, "execute_tool ")}
    assert any("first words" in a for a in args)
    results = [str((t.attributes or {})["gen_ai.tool.call.result"])
               for t in by_name(spans, "execute_tool ")]
    assert any("echo: first words" in r for r in results)
    dumped = json.dumps([dict(s.attributes or {}) for s in spans])
    assert SECRET not in dumped and "[redacted]" in dumped


def test_a_failed_model_call_is_an_error_span_without_its_message_secrets(
        exporter: InMemorySpanExporter) -> None:
    from kanban.agent import FatalModelError

    class Refusing:
        name = "anthropic:claude-x"

        def complete(self, messages: object, tools: object) -> ModelResponse:
            raise FatalModelError(f"401: invalid x-api-key {SECRET}")

    tracer = tracing(exporter)
    run = tracer.run("invoke_agent default", {}, parent=None)
    run.keep_out(lambda text: text.replace(SECRET, "[redacted]"))
    result = run_agent(Refusing(), system="", prompt="hi", toolbox=echo_box(), trace=run)
    run.end("failed", error=True)
    tracer.shutdown()
    assert result.fatal
    (chat,) = by_name(list(exporter.get_finished_spans()), "chat ")
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes is not None
    assert chat.attributes["error.type"] == "FatalModelError"
    assert chat.attributes["gen_ai.provider.name"] == "anthropic"
    assert SECRET not in (chat.status.description or "")


def test_a_child_run_continues_its_parents_trace(exporter: InMemorySpanExporter) -> None:
    tracer = tracing(exporter)
    lead = tracer.run("invoke_agent lead", {}, parent=None)
    assert lead.traceparent is not None and lead.traceparent.startswith("00-")
    child = tracer.run("invoke_agent default", {}, parent=lead.traceparent)
    run_agent(ScriptedModel([text("ok")]), system="", prompt="go", toolbox=echo_box(),
              trace=child)
    child.end("completed", error=False)
    lead.end("waiting", error=False)
    tracer.shutdown()
    spans = list(exporter.get_finished_spans())
    (lead_span,) = by_name(spans, "invoke_agent lead")
    (child_span,) = by_name(spans, "invoke_agent default")
    assert child_span.parent is not None
    assert child_span.parent.span_id == lead_span.context.span_id
    assert {s.context.trace_id for s in spans} == {lead_span.context.trace_id}
