"""A local OTLP/HTTP trace receiver: what workers in other processes export, decoded.

The real exporter posts protobuf `ExportTraceServiceRequest`s to ``/v1/traces``; this
server decodes them (opentelemetry-proto, the exporter's own dependency) into `Span`
records. Use it as a context manager; ``receiver.env()`` points a subprocess at it, and
``receiver.wait_for(predicate)`` waits until the spans received satisfy `predicate`.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.procs import wait_until


@dataclass(frozen=True)
class Span:
    """One received span; ids in hex, `parent_id` "" for a trace's root."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int  # the proto's SpanKind: 1 internal, 3 client
    attributes: dict[str, Any]
    status: int  # the proto's StatusCode: 0 unset, 1 ok, 2 error
    service: str
    start_time_ns: int
    headers: dict[str, str]  # of the request that brought it (lower-case names)

    def attr(self, key: str) -> Any:
        return self.attributes.get(key)


class OtlpReceiver:
    def __init__(self) -> None:
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self) -> dict[str, str]:
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url}

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, predicate: Callable[[list[Span]], bool], *, what: str,
                 timeout: float = 30.0) -> list[Span]:
        try:
            return wait_until(lambda: self.spans if predicate(self.spans) else None,
                              timeout=timeout, what=what)
        except AssertionError as exc:
            got = [(s.name, s.attributes.get("kanban.card.id")) for s in self.spans]
            raise AssertionError(f"{exc}; received {got}") from None

    def _add(self, body: bytes, headers: dict[str, str]) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found: list[Span] = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                found.extend(Span(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                                  s.name, s.kind, _attributes(s.attributes), s.status.code,
                                  str(resource.get("service.name", "")),
                                  s.start_time_unix_nano, headers)
                             for s in scope_spans.spans)
        with self._lock:
            self._spans.extend(found)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _handler_for(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            receiver._add(body, {k.lower(): v for k, v in self.headers.items()})
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Handler
