"""The bubblewrap sandbox tests need Debian's `bwrap` (and, for a sandbox's own network,
`slirp4netns`): `make test` installs them as root.

Without it (or where it cannot make namespaces) they skip and say why; with CI=true that
is a failure instead, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kanban.tools.sandbox import check_sandbox, own_network

REACHED = "loopback-server-reached"


def require_bwrap() -> None:
    check = check_sandbox()
    _require(check.available, check.reason, "sandbox tests")


def require_own_network() -> None:
    """Tests of a sandbox's own network (slirp4netns, which `make test` installs as root)."""
    require_bwrap()
    own = own_network()
    _require(own.available, own.reason, "own-network tests")


def _require(available: bool, reason: str, what: str) -> None:
    """Skip where the part is missing, except under CI=true, where that is a failure."""
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} cannot run under CI: {reason}")
    pytest.skip(reason)


@contextmanager
def loopback_server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering every GET with REACHED; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            body = REACHED.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
