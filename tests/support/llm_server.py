"""A local HTTP server that speaks the OpenAI and Anthropic wire formats, scripted per test.

It lets the real `openai` and `anthropic` clients (in this process or in worker
subprocesses) talk to a fake model. Routes:

- ``POST /v1/chat/completions`` and ``POST /chat/completions``: OpenAI Chat Completions
- ``POST /v1/messages``: Anthropic Messages

Replies are format-neutral `Reply` values, rendered in the format of the route called:

- ``text_reply("hi", usage=(input, output, cached))``
- ``tool_reply(("kanban_show", {}), ("kanban_comment", {"body": "x"}), text=None)``:
  one turn with one or more (parallel) tool calls; a ``str`` argument is sent raw, so
  ``malformed_tool_reply("kanban_show", "{not json")`` sends broken JSON arguments
- ``error_reply(status, message, headers={...})`` and the shortcuts ``rate_limited(
  retry_after="2")`` (or ``retry_after_ms=...``), ``server_error()``, ``unauthorized()``,
  ``forbidden()``, ``model_not_found("gpt-x")``

Scripting:

- ``server.enqueue(*replies)``: replies are served in order, one per request;
- ``LLMServer(responder=fn)``: when the queue is empty, ``fn(request_json) -> Reply``
  answers (a pure function of the request, for long runs where workers in other processes
  call repeatedly). Helpers for responders read either format: ``called_tools(body)``,
  ``tool_results(body)``, ``last_user_text(body)``.
- With neither, the server answers 400 "llm_server: no reply scripted", which the
  adapters treat as fatal, so a test that under-scripts fails fast instead of hanging.

Inspection: ``server.requests`` (a list of `RecordedRequest`: ``route``, ``path``,
``headers`` with lower-case names, ``body`` as parsed JSON), ``server.wait_for_requests(n,
timeout=5)``, ``server.pending`` (replies not served yet), ``server.assert_consumed()``.

Addresses: ``server.openai_base_url`` (ends in ``/v1``), ``server.anthropic_base_url``,
and ``server.env()``: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_BASE_URL`` for a subprocess's environment.

Use it as a context manager (``with LLMServer() as server:``) or as the ``llm_server``
pytest fixture defined here (import it into a conftest.py).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

ROUTES = {"/v1/chat/completions": "openai", "/chat/completions": "openai"}
ROUTES["/v1/messages"] = "anthropic"
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


def text_reply(text: str, *, usage: tuple[int, int, int] | None = None) -> Reply:
    return Reply(text=text, usage=usage)


def tool_reply(*calls: tuple[str, dict[str, Any] | str], text: str | None = None) -> Reply:
    return Reply(text=text, tool_calls=tuple(ScriptedCall(n, a) for n, a in calls))


def malformed_tool_reply(name: str, raw_arguments: str = '{"summary": "unterminated') -> Reply:
    return tool_reply((name, raw_arguments))


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


@dataclass(frozen=True)
class RecordedRequest:
    route: str  # "openai" or "anthropic"
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class LLMServer:
    """A threaded HTTP server on 127.0.0.1 (a free port), serving scripted replies."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder = responder
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._changed = threading.Condition()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> LLMServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
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
        return f"http://{host}:{port}"

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
            reply = server._next_reply(RecordedRequest(route, path, headers, body))
            status, payload = _render(server, route, reply, body, len(raw))
            self._send(status, payload, reply.headers)

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


def _render(
    server: LLMServer, route: str, reply: Reply, body: dict[str, Any], size: int
) -> tuple[int, dict[str, Any]]:
    if reply.status != 200:
        return reply.status, _error_body(route, reply)
    usage = reply.usage or _estimate_usage(reply, size)
    if route == "openai":
        return 200, _openai_completion(server, reply, body, usage)
    return 200, _anthropic_message(server, reply, body, usage)


def _estimate_usage(reply: Reply, request_size: int) -> tuple[int, int, int]:
    produced = len(reply.text or "") + sum(len(_raw_arguments(c)) for c in reply.tool_calls)
    return request_size // 4, produced // 4 + 1, 0


def _raw_arguments(call: ScriptedCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _openai_completion(
    server: LLMServer, reply: Reply, body: dict[str, Any], usage: tuple[int, int, int]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        functions = [{"name": c.name, "arguments": _raw_arguments(c)} for c in reply.tool_calls]
        message["tool_calls"] = [
            {"id": server._next_id("call"), "type": "function", "function": function}
            for function in functions
        ]
    prompt, completion, cached = usage
    finish = "tool_calls" if reply.tool_calls else "stop"
    return {
        "id": server._next_id("chatcmpl"),
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "unknown"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def _anthropic_message(
    server: LLMServer, reply: Reply, body: dict[str, Any], usage: tuple[int, int, int]
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text is not None:
        content.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:  # a str `arguments` plays a broken input
        block = {"type": "tool_use", "id": server._next_id("toolu"), "name": call.name}
        content.append(block | {"input": call.arguments})
    prompt, completion, cached = usage
    return {
        "id": server._next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "unknown"),
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt - cached,
            "output_tokens": completion,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        },
    }


ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                         403: "permission_error", 404: "not_found_error",
                         429: "rate_limit_error", 529: "overloaded_error"}


def _error_body(route: str, reply: Reply) -> dict[str, Any]:
    if route == "openai":
        code = "model_not_found" if reply.status == 404 else None
        error = {"message": reply.error_message, "type": "api_error", "param": None, "code": code}
        return {"error": error}
    kind = ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": reply.error_message}}


# --- helpers for responders: read a request body of either format ----------------------


def called_tools(body: dict[str, Any]) -> list[str]:
    """Names of the tools the assistant called so far in this conversation, in order."""
    names: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") != "assistant":
            continue
        names += [call["function"]["name"] for call in message.get("tool_calls") or []]
        names += [b["name"] for b in _blocks(message) if b.get("type") == "tool_use"]
    return names


def tool_results(body: dict[str, Any]) -> list[str]:
    """The contents of every tool result in this conversation, in order."""
    results: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") == "tool":
            results.append(str(message.get("content") or ""))
        blocks = [b for b in _blocks(message) if b.get("type") == "tool_result"]
        results += [_block_text(b.get("content")) for b in blocks]
    return results


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the latest user message (tool results left out)."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        if isinstance(message.get("content"), str):
            return message["content"]
        texts = [b.get("text", "") for b in _blocks(message) if b.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return ""


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _block_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content or "")
