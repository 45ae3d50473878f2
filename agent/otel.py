"""The OpenTelemetry side of kanban.agent.tracing: spans after the GenAI semantic
conventions (invoke_agent, chat, execute_tool). Imported only when traces are on.

Spans name their parent explicitly (never through the current context), so tool calls on
the executor's threads nest under their run like the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from kanban.agent.tracing import ModelSpan, RunTrace, Scrub, ToolSpan, TraceSettings
from kanban.agent.types import Message, ModelResponse, ToolCall, ToolResult, ToolSpec, Usage

SCOPE = "kanban"
# gen_ai.provider.name by the provider part of a model spec (scripted: our offline models)
PROVIDERS = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic",
             "scripted": "kanban.scripted"}
_PROPAGATOR = TraceContextTextMapPropagator()
# A collector that does not answer delays a worker's exit by at most this (retries included)
EXPORT_TIMEOUT_S = 5.0


class OtelTracing:
    """A tracer provider of its own (the global one is left alone) and its exporter."""

    def __init__(self, exporter: SpanExporter, *, capture_content: bool = False,
                 service_name: str = "kanban", batch: bool = True) -> None:
        self.capture_content = capture_content
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(SCOPE)

    def run(self, name: str, attributes: Mapping[str, Any], *,
            parent: str | None) -> OtelRunTrace:
        """Begin a run's span under `parent` (a traceparent; None: a new trace)."""
        context = _PROPAGATOR.extract({"traceparent": parent}) if parent else Context()
        span = self.tracer.start_span(name, context=context, kind=SpanKind.INTERNAL,
                                      attributes=dict(attributes))
        return OtelRunTrace(self, span)

    def shutdown(self) -> None:
        """Send what is buffered and stop (a worker's last step)."""
        self.provider.shutdown()


class OtelRunTrace(RunTrace):
    def __init__(self, tracing: OtelTracing, span: Span) -> None:
        super().__init__()
        self.span = span
        self.tracing = tracing
        self.context = trace.set_span_in_context(span)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=self.context)
        self.traceparent = carrier.get("traceparent")

    def keep_out(self, scrub: Scrub) -> None:
        self.scrub = scrub

    def model_call(self, model: str, messages: Sequence[Message],
                   tools: Sequence[ToolSpec]) -> ModelSpan:
        provider, name = _split(model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
            "gen_ai.system": provider, "gen_ai.request.model": name}
        if self.tracing.capture_content:
            attributes.update(_input(messages, tools, self.scrub))
        span = self.tracing.tracer.start_span(f"chat {name}", context=self.context,
                                              kind=SpanKind.CLIENT, attributes=attributes)
        return OtelModelSpan(span, self.tracing.capture_content, self.scrub)

    def tool_call(self, call: ToolCall) -> ToolSpan:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function"}
        if self.tracing.capture_content:
            attributes["gen_ai.tool.call.arguments"] = self.scrub(call.arguments)
        span = self.tracing.tracer.start_span(f"execute_tool {call.name}", context=self.context,
                                              kind=SpanKind.INTERNAL, attributes=attributes)
        return OtelToolSpan(span, self.tracing.capture_content, self.scrub)

    def finished(self, stop_reason: str, usage: Usage, turns: int) -> None:
        self.span.set_attributes({"kanban.stop_reason": stop_reason, "kanban.turns": turns,
                                  "gen_ai.usage.input_tokens": usage.input_tokens,
                                  "gen_ai.usage.output_tokens": usage.output_tokens})

    def end(self, outcome: str, *, error: bool) -> None:
        """End the run's span with how the worker ended it."""
        self.span.set_attribute("kanban.outcome", outcome)
        if error:
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()


class OtelModelSpan(ModelSpan):
    def __init__(self, span: Span, capture: bool, scrub: Scrub) -> None:
        self.span, self.capture, self.scrub = span, capture, scrub

    def answered(self, response: ModelResponse) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.response.finish_reasons": [response.stop_reason],
            "gen_ai.usage.input_tokens": response.usage.input_tokens,
            "gen_ai.usage.output_tokens": response.usage.output_tokens}
        if response.model:
            attributes["gen_ai.response.model"] = response.model
        if response.source:  # a fallback model may have answered
            provider, _ = _split(response.source)
            attributes["gen_ai.provider.name"] = attributes["gen_ai.system"] = provider
        if self.capture:
            attributes["gen_ai.output.messages"] = _output(response, self.scrub)
        self.span.set_attributes(attributes)
        self.span.end()

    def failed(self, error: BaseException) -> None:
        self.span.set_attribute("error.type", type(error).__name__)
        self.span.set_status(Status(StatusCode.ERROR, self.scrub(str(error))[:500]))
        self.span.end()


class OtelToolSpan(ToolSpan):
    def __init__(self, span: Span, capture: bool, scrub: Scrub) -> None:
        self.span, self.capture, self.scrub = span, capture, scrub

    def answered(self, result: ToolResult) -> None:
        if self.capture:
            self.span.set_attribute("gen_ai.tool.call.result", self.scrub(result.content))
        if result.is_error:
            self.span.set_attribute("error.type", "tool_error")
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()


def otlp_tracing(settings: TraceSettings) -> OtelTracing:
    """Spans posted in batches to an OTLP/HTTP collector."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=settings.endpoint, headers=dict(settings.headers),
                                timeout=EXPORT_TIMEOUT_S)
    return OtelTracing(exporter, capture_content=settings.capture_content,
                       service_name=settings.service_name)


def _split(spec: str) -> tuple[str, str]:
    provider, colon, name = spec.partition(":")
    if not colon:
        return "unknown", spec
    return PROVIDERS.get(provider, provider), name


def _input(messages: Sequence[Message], tools: Sequence[ToolSpec],
           scrub: Scrub) -> dict[str, str]:
    """The opt-in request content: instructions, messages and the tools offered."""
    system = [m.content or "" for m in messages if m.role == "system"]
    chat = [_message(m, scrub) for m in messages if m.role != "system"]
    out = {"gen_ai.input.messages": json.dumps(chat, ensure_ascii=False)}
    if system:
        out["gen_ai.system_instructions"] = json.dumps(
            [{"type": "text", "content": scrub(text)} for text in system], ensure_ascii=False)
    if tools:
        out["gen_ai.tool.definitions"] = json.dumps(
            [{"type": "function", "name": t.name, "description": t.description}
             for t in tools], ensure_ascii=False)
    return out


def _message(message: Message, scrub: Scrub) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append({"type": "tool_call_response", "id": message.tool_call_id,
                      "response": scrub(message.content or "")})
    elif message.content:
        parts.append({"type": "text", "content": scrub(message.content)})
    parts.extend({"type": "tool_call", "id": c.id, "name": c.name,
                  "arguments": scrub(c.arguments)} for c in message.tool_calls)
    return {"role": message.role, "parts": parts}


def _output(response: ModelResponse, scrub: Scrub) -> str:
    parts: list[dict[str, Any]] = []
    if response.text:
        parts.append({"type": "text", "content": scrub(response.text)})
    parts.extend({"type": "tool_call", "id": c.id, "name": c.name,
                  "arguments": scrub(c.arguments)} for c in response.tool_calls)
    return json.dumps([{"role": "assistant", "parts": parts,
                        "finish_reason": response.stop_reason}], ensure_ascii=False)
