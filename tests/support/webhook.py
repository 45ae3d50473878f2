"""A local webhook receiver: answers with scripted status codes and records every request.

`WebhookReceiver(statuses=[500, 500])` answers the first two POSTs with 500 and every later
one with 200 (or `default`). Each request is kept as a `Received` with its headers (lower
case), raw body and whether its HMAC-SHA256 signature matches `secret`. `accepted` lists the
bodies answered 2xx; `wait_for(n)` waits until n requests have arrived. A receiver made
with `hold=True` keeps each request waiting until `release()` (one that does not answer).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIGNATURE_HEADER = "x-kanban-signature-256"


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered
    signed: bool  # the signature header matches the body and the secret

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    def __init__(self, secret: str = "test-secret", statuses: list[int] | None = None,
                 default: int = 200, hold: bool = False, hold_timeout: float = 60.0) -> None:
        self.secret = secret
        self.statuses = list(statuses or [])
        self.default = default
        self.requests: list[Received] = []
        self.arrived = 0
        self._held = threading.Event()
        if not hold:
            self._held.set()
        self._hold_timeout = hold_timeout
        self._lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver._answer(self, self.path, headers, body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # quiet: the test reads `requests`

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def expected_signature(self, body: bytes) -> str:
        return "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()

    def release(self) -> None:
        self._held.set()

    @property
    def holding(self) -> bool:
        return not self._held.is_set()

    def _answer(self, handler: BaseHTTPRequestHandler, path: str, headers: dict[str, str],
                body: bytes) -> None:
        with self._lock:
            self.arrived += 1
            self._lock.notify_all()
        self._held.wait(self._hold_timeout)
        with self._lock:
            status = self.statuses.pop(0) if self.statuses else self.default
            signed = hmac.compare_digest(headers.get(SIGNATURE_HEADER, ""),
                                         self.expected_signature(body))
            self.requests.append(Received(path, headers, body, status, signed))
            self._lock.notify_all()
        handler.send_response(status)
        reply = b"ok" if status < 300 else b"receiver says no"
        handler.send_header("Content-Length", str(len(reply)))
        handler.end_headers()
        handler.wfile.write(reply)

    @property
    def accepted(self) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if 200 <= r.status < 300]

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.arrived < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"webhook got {self.arrived} requests, "
                                         f"expected {count} within {timeout}s")
                self._lock.wait(left)
            return list(self.requests)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()


def receiver(statuses: list[int] | None = None, **kwargs: Any) -> Iterator[WebhookReceiver]:
    """For fixtures: `yield from receiver([500])`."""
    with WebhookReceiver(statuses=statuses, **kwargs) as hook:
        yield hook
