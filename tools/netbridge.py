"""Commands of a card with a network list: steered to the worker's proxy (`netproxy`).

Inside the sandbox there is no network but loopback, and tools want a TCP proxy address.
So each command starts under a bridge, the worker's own Python run isolated (`-I -S`) on a
small script: it listens on 127.0.0.1 in the command's network namespace, forwards every
connection to the proxy's Unix socket, sets the proxy variables, and runs the command,
exiting with its status. Without bwrap the same bridge steers the command, but nothing
stops it from connecting directly (the run's sandbox note says so).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from kanban.tools.netproxy import NetProxy
from kanban.tools.runner import CommandResult, CommandSpec, Runner

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                   "all_proxy")
# Self-contained: it runs under `python -I -S` inside the sandbox, imports nothing of ours.
BRIDGE = r"""
import ctypes, os, signal, socket, sys, threading
path, argv = sys.argv[1], sys.argv[2:]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)
url = "http://127.0.0.1:%d" % listener.getsockname()[1]
for name in __NAMES__:
    os.environ[name] = url
os.environ["NO_PROXY"] = os.environ["no_proxy"] = ""
bridge = os.getpid()
pid = os.fork()
if pid == 0:
    listener.close()
    try:  # the command dies with its bridge, even a bridge killed outright
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != bridge:  # it died before the line above
        os._exit(137)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("%s: %s\n" % (argv[0], exc.strerror))
        os._exit(127)

def pump(source, target):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    try:
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def serve(conn):
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(path)
    except OSError:
        conn.close()
        return
    back = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
    back.start()
    pump(conn, upstream)
    back.join()
    conn.close()
    upstream.close()

def accept():
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()

def forward(number, frame):
    try:
        os.kill(pid, number)
    except OSError:
        pass

for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, forward)
threading.Thread(target=accept, daemon=True).start()
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
os._exit(code if code >= 0 else 128 - code)
""".replace("__NAMES__", repr(PROXY_VARIABLES))


def bridge_argv(socket_path: Path, argv: Sequence[str], python: str | None = None
                ) -> list[str]:
    """`argv` started under the bridge to the proxy listening on `socket_path`; the
    interpreter is the worker's own, resolved past any venv (the bridge needs only the
    standard library: `sys.base_prefix` must be readable in the sandbox)."""
    return [python or os.path.realpath(sys.executable), "-I", "-S", "-c", BRIDGE,
            str(socket_path), *argv]


class ProxiedRunner:
    """A runner (plain or bwrap) whose commands start under the bridge; the proxy starts
    with the first command and stops with `close()`."""

    def __init__(self, inner: Runner, proxy: NetProxy) -> None:
        self.inner = inner
        self.proxy = proxy
        self.name = inner.name

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        self.proxy.start()
        return self.inner.wrap(bridge_argv(self.proxy.socket_path, argv), cwd)

    def run(self, spec: CommandSpec) -> CommandResult:
        self.proxy.start()
        return self.inner.run(replace(spec, argv=tuple(
            bridge_argv(self.proxy.socket_path, spec.argv))))

    def cancel_all(self) -> None:
        self.inner.cancel_all()

    def close(self) -> None:
        self.proxy.stop()
