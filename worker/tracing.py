"""A worker's traces (issue 32): with telemetry on, each card run is a span continuing the
trace stored with the card, and the cards the run makes continue the run's span.

Off (the default), nothing here imports OpenTelemetry: see kanban.agent.tracing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

from kanban.agent.tracing import NO_TRACE, RunTrace, TraceSettings
from kanban.records import CardRecord
from kanban.state.config import Config
from kanban.tools.scope import WorkerScope
from kanban.trace_links import adopt_trace, trace_parent
from kanban.triage import TRIAGED_ROLE
from kanban.worker.outcome import retrying

if TYPE_CHECKING:
    from kanban.agent.otel import OtelTracing

T = TypeVar("T")
TRACES_PATH = "/v1/traces"
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def trace_settings(config: Config, env: Mapping[str, str]) -> TraceSettings | None:
    """Where this worker's spans go, from `[telemetry]` and the OTEL_* variables; None: off."""
    table = config.telemetry
    if not table.enabled or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    endpoint = _traces_url(table.endpoint, env)
    if endpoint is None:
        return None
    headers = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") \
        or env.get("OTEL_EXPORTER_OTLP_HEADERS", "")
    capture = table.capture_content or env.get(CAPTURE_ENV, "").strip().lower() == "true"
    return TraceSettings(endpoint, _headers(headers), capture_content=capture,
                         service_name=env.get("OTEL_SERVICE_NAME") or table.service_name)


def _traces_url(configured: str | None, env: Mapping[str, str]) -> str | None:
    """config.toml's base URL, else the variables' (OTLP's rule: a signal's own variable is
    the whole URL, the general one a base that gets /v1/traces)."""
    if configured:
        return configured.rstrip("/") + TRACES_PATH
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + TRACES_PATH if base else None


def _headers(text: str) -> dict[str, str]:
    """`key=value,key2=value2` (values percent-encoded), as OTLP's variables write them."""
    out: dict[str, str] = {}
    for pair in text.split(","):
        key, equals, value = pair.partition("=")
        if equals and key.strip():
            out[unquote(key.strip()).lower()] = unquote(value.strip())
    return out


def start(config: Config, env: Mapping[str, str]) -> OtelTracing | None:
    """The worker's tracer (None: telemetry off, or its extra missing, which is said once)."""
    settings = trace_settings(config, env)
    if settings is None:
        return None
    try:
        from kanban.agent.otel import otlp_tracing  # the SDK: only with traces on

        return otlp_tracing(settings)
    except ImportError as exc:
        print(f"kanban worker: traces are off: the otel extra is not installed ({exc.name}); "
              "pip install 'kanban-workbench[otel]'", file=sys.stderr, flush=True)
        return None


def traced(tracer: OtelTracing | None, scope: WorkerScope, card: CardRecord,
           body: Callable[[RunTrace], T], judge: Callable[[T], tuple[str, bool]]) -> T:
    """`body` (the card's run) inside its span, ended with what `judge` makes of its result
    (an outcome, and whether it is an error); without a tracer, just `body`."""
    if tracer is None:
        return body(NO_TRACE)
    parent = retrying(scope, lambda: _stored(scope, card.id))
    name, attributes = _describe(card, scope, tracer.capture_content)
    run = tracer.run(name, attributes, parent=parent)
    outcome, error = "crashed", True
    try:
        if run.traceparent is not None:
            scope.traceparent = run.traceparent  # the cards this run makes continue it
            if parent is None:  # a root: its later runs join this trace
                tp = run.traceparent
                scope.write(lambda conn: adopt_trace(conn, card.id, tp))
        result = body(run)
        outcome, error = judge(result)
        return result
    finally:
        run.end(outcome, error=error)
        scope.traceparent = None


def _stored(scope: WorkerScope, card_id: int) -> str | None:
    with scope.kb.db.read() as conn:
        return trace_parent(conn, card_id)


def _describe(card: CardRecord, scope: WorkerScope,
              capture: bool) -> tuple[str, dict[str, Any]]:
    """The run span's name and attributes: an agent's run is GenAI's invoke_agent."""
    attributes: dict[str, Any] = {"kanban.board": card.board, "kanban.card.id": card.id,
                                  "kanban.run.id": scope.run_id, "kanban.attempt": card.attempt,
                                  "kanban.card.role": card.role}
    if card.parent_id is not None:
        attributes["kanban.card.parent_id"] = card.parent_id
    if capture:
        attributes["kanban.card.title"] = card.title
    if card.command is not None:
        return f"run_script card {card.id}", attributes
    if card.role == TRIAGED_ROLE:
        return f"roll_up card {card.id}", attributes
    attributes.update({"gen_ai.operation.name": "invoke_agent",
                       "gen_ai.agent.name": card.profile, "gen_ai.agent.id": f"card-{card.id}"})
    return f"invoke_agent {card.profile}", attributes
