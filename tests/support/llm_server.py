"""A local HTTP server that speaks the OpenAI and Anthropic wire formats, scripted per test.

It lets the real `openai` and `anthropic` clients (in this process or in worker
subprocesses) talk to a fake model. Routes:

- ``POST /v1/chat/completions`` and ``POST /chat/completions``: OpenAI Chat Completions
- ``POST /v1/responses`` and ``POST /responses``: OpenAI Responses
- ``POST /v1/messages``: Anthropic Messages

A request with ``"stream": true`` gets server-sent events in its format (see
`tests.support.llm_wire`); otherwise one JSON body.

Replies are format-neutral `Reply` values, rendered in the format of the route called:

- ``text_reply("hi", usage=(input, output, cached), reasoning="thinking...")``
- ``tool_reply(("kanban_show", {}), ("kanban_comment", {"body": "x"}), text=None)``:
  one turn with one or more (parallel) tool calls; a ``str`` argument is sent raw, so
  ``malformed_tool_reply("kanban_show", "{not json")`` sends broken JSON arguments
- ``error_reply(status, message, headers={...})`` and the shortcuts ``rate_limited(
  retry_after="2")`` (or ``retry_after_ms=...``), ``server_error()``, ``unauthorized()``,
  ``forbidden()``, ``model_not_found("gpt-x")``, ``context_overflow()``
- streaming knobs on any reply (``dataclasses.replace`` or the helpers' keywords):
  ``chunk_chars`` (text per delta), ``chunk_delay`` (seconds between events) and
  ``fail_after`` (break off with an in-stream error after that many deltas)

Scripting:

- ``server.enqueue(*replies)``: replies are served in order, one per request;
- ``LLMServer(responder=fn)``: when the queue is empty, ``fn(request_json) -> Reply``
  answers (a pure function of the request, for long runs where workers in other processes
  call repeatedly). Helpers for responders read any format: ``called_tools(body)``,
  ``tool_results(body)``, ``last_user_text(body)``, ``system_text(body)``.
- With neither, the server answers 400 "llm_server: no reply scripted", which the
  adapters treat as fatal, so a test that under-scripts fails fast instead of hanging.

Inspection: ``server.requests`` (a list of `RecordedRequest`: ``route``, ``path``,
``headers`` with lower-case names, ``body`` as parsed JSON, ``size`` in bytes),
``server.wait_for_requests(n, timeout=5)``, ``server.pending`` (replies not served yet),
``server.assert_consumed()``, ``server.aborted`` (streams the client hung up on) and
``server.wait_for_abort(timeout=5)``.

Addresses: ``server.openai_base_url`` (ends in ``/v1``), ``server.anthropic_base_url``,
and ``server.env()``: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_BASE_URL`` for a subprocess's environment.

Use it as a context manager (``with LLMServer() as server:``) or as the ``llm_server``
pytest fixture defined here (import it into a conftest.py).
"""

from __future__ import annotations

import itertools
import json
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.llm_bodies import (  # noqa: F401 - re-exported for responders
    called_tools,
    last_user_text,
    system_text,
    tool_results,
)
from tests.support.llm_wire import EVENTS, encode, estimate_usage, render

ROUTES = {"/v1/chat/completions": "openai", "/chat/completions": "openai"}
ROUTES["/v1/messages"] = "anthropic"
ROUTES |= {"/v1/responses": "responses", "/responses": "responses"}
TEST_API_KEY = "test-key"

Responder = Callable[[dict[str, Any]], "Reply"]


@dataclass(frozen=True)
class ScriptedCall:
    """One tool call in a reply; `arguments` is a dict, or a str sent as-is (maybe broken)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text and/or tool calls, or an HTTP error status."""

    text: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    status: int = 200
    error_message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int, int] | None = None  # input, output, cached
    reasoning: str | None = None  # thinking / reasoning summary, before the answer
    chunk_chars: int = 16  # streamed: characters per delta
    chunk_delay: float = 0.0  # streamed: seconds between events
    fail_after: int | None = None  # streamed: an in-stream error after this many deltas
    error_code: str | None = None  # OpenAI's `code` for an error status
    raw_body: bytes | None = None  # sent as-is with status 200 (a proxy's HTML page, say)


def text_reply(text: str, *, usage: tuple[int, int, int] | None = None,
               reasoning: str | None = None, **stream: Any) -> Reply:
    return Reply(text=text, usage=usage, reasoning=reasoning, **stream)


def tool_reply(*calls: tuple[str, dict[str, Any] | str], text: str | None = None,
               reasoning: str | None = None, **stream: Any) -> Reply:
    return Reply(text=text, tool_calls=tuple(ScriptedCall(n, a) for n, a in calls),
                 reasoning=reasoning, **stream)


def malformed_tool_reply(name: str, raw_arguments: str = '{"summary": "unterminated') -> Reply:
    return tool_reply((name, raw_arguments))


def garbage_reply(body: bytes = b"<html><body>502 Bad Gateway</body></html>") -> Reply:
    """A 200 whose body is not what the API speaks (streamed or not)."""
    return Reply(raw_body=body)


def error_reply(status: int, message: str = "", *, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, error_message=message or f"error {status}", headers=headers or {})


def rate_limited(retry_after: str | None = "1", *, retry_after_ms: str | None = None) -> Reply:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    if retry_after_ms is not None:
        headers["retry-after-ms"] = retry_after_ms
    return error_reply(429, "Rate limit reached, slow down", headers=headers)


def server_error(status: int = 500) -> Reply:
    return error_reply(status, "The server had an error while processing your request")


unauthorized = partial(error_reply, 401, "Incorrect API key provided")
forbidden = partial(error_reply, 403, "Your key has no access to this model")


def model_not_found(model: str = "no-such-model") -> Reply:
    return error_reply(404, f"The model '{model}' does not exist")


def context_overflow(tokens: int = 140_000, window: int = 128_000) -> Reply:
    """The provider's answer to a request longer than the context window (HTTP 400)."""
    message = (f"This model's maximum context length is {window} tokens. However, your "
               f"messages resulted in {tokens} tokens; prompt is too long: {tokens} tokens > "
               f"{window} maximum")
    return replace(error_reply(400, message), error_code="context_length_exceeded")


@dataclass(frozen=True)
class RecordedRequest:
    route: str  # "openai", "responses" or "anthropic"
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    size: int = 0  # bytes of the request body


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # hundreds of workers may call at once (a fleet test)


class LLMServer:
    """A threaded HTTP server on 127.0.0.1 (a free port), serving scripted replies."""

    def __init__(self, responder: Responder | None = None, *,
                 tls: ssl.SSLContext | None = None) -> None:
        self.responder = responder
        self.tls = tls  # a server context: HTTPS on the same port
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._changed = threading.Condition()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._aborted = 0

    def start(self) -> LLMServer:
        self._httpd = _Server(("127.0.0.1", 0), _handler_for(self))
        if self.tls is not None:
            self._httpd.socket = self.tls.wrap_socket(self._httpd.socket, server_side=True)
        serve = partial(self._httpd.serve_forever, poll_interval=0.01)  # stop() is quick
        self._thread = threading.Thread(target=serve, name="llm-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self._httpd, self._thread = None, None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("LLMServer is not started")
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def env(self) -> dict[str, str]:
        """Environment variables pointing both SDKs at this server."""
        keys = {"OPENAI_API_KEY": TEST_API_KEY, "ANTHROPIC_API_KEY": TEST_API_KEY}
        return keys | {"OPENAI_BASE_URL": self.openai_base_url, "ANTHROPIC_BASE_URL": self.url}

    def enqueue(self, *replies: Reply) -> None:
        with self._changed:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        with self._changed:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._changed:
            return list(self._requests)

    def assert_consumed(self) -> None:
        if self.pending:
            raise AssertionError(f"llm_server: {self.pending} scripted reply(ies) not served")

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `count` requests arrived; raise TimeoutError otherwise."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(f"llm_server: {len(self._requests)} of {count} requests")
            return list(self._requests)

    @property
    def aborted(self) -> int:
        """How many streams the client hung up on before their end."""
        with self._changed:
            return self._aborted

    def wait_for_abort(self, timeout: float = 5.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self._aborted > 0, timeout):
                raise TimeoutError("llm_server: no client hung up on a stream")

    def _note_abort(self) -> None:
        with self._changed:
            self._aborted += 1
            self._changed.notify_all()

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._changed:
            self._requests.append(request)
            self._changed.notify_all()
            if self._queue:
                return self._queue.popleft()
        if self.responder is None:
            return error_reply(400, "llm_server: no reply scripted for this request")
        try:
            return self.responder(request.body)
        except Exception as exc:  # report it to the client and the test, do not kill the server
            return error_reply(400, f"llm_server responder raised {type(exc).__name__}: {exc}")

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"


@pytest.fixture
def llm_server() -> Iterator[LLMServer]:
    """A started LLMServer, stopped after the test."""
    with LLMServer() as server:
        yield server


# --- wire rendering --------------------------------------------------------------------


def _handler_for(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            path = self.path.split("?", 1)[0]
            route = ROUTES.get(path)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if route is None:
                self._send(404, {"error": {"message": f"llm_server: no route {path}"}}, {})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "llm_server: body is not JSON"}}, {})
                return
            headers = {key.lower(): value for key, value in self.headers.items()}
            reply = server._next_reply(RecordedRequest(route, path, headers, body, len(raw)))
            if reply.raw_body is not None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(reply.raw_body)))
                self.end_headers()
                self.wfile.write(reply.raw_body)
                return
            if reply.status == 200 and body.get("stream"):
                self._stream(route, reply, body, len(raw))
                return
            status, payload = render(server, route, reply, body, len(raw))
            self._send(status, payload, reply.headers)

        def _stream(self, route: str, reply: Reply, body: dict[str, Any], size: int) -> None:
            usage = reply.usage or estimate_usage(reply, size)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            try:
                for event in EVENTS[route](server, reply, body, usage):
                    self.wfile.write(encode(event))
                    self.wfile.flush()
                    if reply.chunk_delay:
                        time.sleep(reply.chunk_delay)  # a slow model, by design
            except (BrokenPipeError, ConnectionResetError):
                server._note_abort()

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # keep test output clean

    return Handler
