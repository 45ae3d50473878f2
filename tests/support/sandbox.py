"""The bubblewrap sandbox tests need Debian's `bwrap` (and, for a sandbox's own network,
`slirp4netns`): `make test` installs them as root.

Without it (or where it cannot make namespaces) they skip and say why; with CI=true that
is a failure instead, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kanban.tools.hostview import own_interpreter
from kanban.tools.runner import CommandResult, CommandSpec, PlainRunner
from kanban.tools.sandbox import SandboxPolicy, check_sandbox, own_network
from kanban.tools.sandbox_runner import BwrapRunner

REACHED = "loopback-server-reached"


def require_bwrap() -> None:
    check = check_sandbox()
    require(check.available, check.reason, "sandbox tests")


def sandbox_workspace(tmp_path: Path) -> Path:
    """A card's folder for sandboxed commands (skips where bwrap cannot sandbox)."""
    require_bwrap()
    path = tmp_path / "ws"
    path.mkdir()
    return path


def card_runner(workspace: Path, inner: PlainRunner | None = None, *,
                session: bool = True) -> BwrapRunner:
    """A runner as a card's: its workspace writable, no network, kanban's Python readable
    (the card's sandbox, `session`, runs on it)."""
    policy = SandboxPolicy(writable=(workspace,), network=False, readable=own_interpreter())
    return BwrapRunner(policy, inner, session=session)


def run_in(box: BwrapRunner | PlainRunner, workspace: Path, command: str, *, out: str = "o.txt",
           **kwargs: object) -> tuple[CommandResult, str]:
    """`command` run by `box` in `workspace`: its result and its output."""
    path = workspace.parent / "out" / out
    spec = CommandSpec.shell(command, cwd=workspace, env={"PATH": os.environ["PATH"]},
                             output_path=path, **{"timeout_s": 20.0, **kwargs})
    result = box.run(spec)
    return result, path.read_text()


def require_own_network() -> None:
    """Tests of a sandbox's own network (slirp4netns, which `make test` installs as root)."""
    require_bwrap()
    own = own_network()
    require(own.available, own.reason, "own-network tests")


def require_root_with(program: str, what: str) -> None:
    """Tests that act as root with `program` (unshare, setpriv) beside the sandbox."""
    require(os.geteuid() == 0, "runs as root only", what)
    require(shutil.which(program) is not None, f"{program} is not installed", what)


def require(available: bool, reason: str, what: str) -> None:
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


class Listener:
    """A TCP service on `host` that greets whoever connects with `greeting`, and counts
    them: what a sandboxed command must not reach."""

    def __init__(self, host: str, greeting: bytes) -> None:
        self.sock = socket.create_server((host, 0))
        self.port: int = self.sock.getsockname()[1]
        self.greeting = greeting
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.sendall(self.greeting)

    def close(self) -> None:
        self.sock.close()
