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
from kanban.tools.sandbox_runner import BwrapRunner
from kanban.tools.seccomp import program

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                   "all_proxy")
# Self-contained: it runs under `python -I -S` inside the sandbox and imports nothing of
# ours, and only built-in modules (`socket`, `signal`, `threading` would import enum and
# more: tens of milliseconds per command). argv: socket path, "1" to tie the command's life
# to the bridge's (outside bwrap, whose PID namespace does that already), the seccomp filter
# to load on the command (hex, or empty; in bwrap, which does not load it on the bridge:
# the bridge makes a Unix socket per connection), the command.
BRIDGE = r"""
import os, sys, _signal, _socket, _thread
path, tie, seccomp, argv = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4:]
listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
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
    if tie:
        try:  # the command dies with its bridge, even a bridge killed outright
            import ctypes
            ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
        except (ImportError, OSError, AttributeError):
            pass
        if os.getppid() != bridge:  # it died before the line above
            os._exit(137)
    if seccomp:  # as bwrap would have: no_new_privs, then the filter; else no command
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            code = bytes.fromhex(seccomp)
            program = ctypes.create_string_buffer(code, len(code))
            class Fprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
            fprog = Fprog(len(code) // 8, ctypes.addressof(program))
            if libc.prctl(38, 1, 0, 0, 0) != 0 or \
                    libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl")
        except (ImportError, OSError, AttributeError) as exc:
            sys.stderr.write("the sandbox's seccomp filter did not load: %s\n" % exc)
            os._exit(126)
    # os.execvp's PATH search imports warnings (milliseconds): search PATH here instead
    folders = [""] if "/" in argv[0] else os.environ.get("PATH", os.defpath).split(":")
    error = None
    for folder in folders:
        try:
            os.execv(os.path.join(folder, argv[0]) if folder else argv[0], argv)
        except OSError as exc:
            error = error if exc.errno == 2 and error else exc
    sys.stderr.write("%s: %s\n" % (argv[0], error.strerror))
    os._exit(127)

def pump(source, target, done):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    try:
        target.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    if done is not None:
        done.release()

def serve(fd):
    conn = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        conn.close()
        return
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(pump, (upstream, conn, done))
    pump(conn, upstream, None)
    done.acquire()
    conn.close()
    upstream.close()

def accept():
    while True:
        fd, _ = listener._accept()
        _thread.start_new_thread(serve, (fd,))

def forward(number, frame):
    try:
        os.kill(pid, number)
    except OSError:
        pass

for number in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
    _signal.signal(number, forward)
_thread.start_new_thread(accept, ())
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
os._exit(code if code >= 0 else 128 - code)
""".replace("__NAMES__", repr(PROXY_VARIABLES))


def bridge_argv(socket_path: Path, argv: Sequence[str], *, tie: bool = True,
                python: str | None = None, seccomp: bytes | None = None) -> list[str]:
    """`argv` started under the bridge to the proxy listening on `socket_path` (`tie`:
    the command gets SIGKILL if the bridge dies; `seccomp`: a filter the bridge loads on
    the command). The interpreter is the worker's own, resolved past any venv:
    `sys.base_prefix` must be readable in the sandbox."""
    return [python or os.path.realpath(sys.executable), "-I", "-S", "-c", BRIDGE,
            str(socket_path), "1" if tie else "0", seccomp.hex() if seccomp else "", *argv]


class ProxiedRunner:
    """A runner (plain or bwrap) whose commands start under the bridge; the proxy starts
    with the first command and stops with `close()`."""

    def __init__(self, inner: Runner, proxy: NetProxy) -> None:
        self.inner = inner
        self.proxy = proxy
        self.name = inner.name
        self.own_pids = getattr(inner, "own_pids", False)

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        self.proxy.start()
        return self.inner.wrap(self._bridged(argv), cwd)

    def run(self, spec: CommandSpec) -> CommandResult:
        self.proxy.start()
        return self.inner.run(replace(spec, argv=tuple(self._bridged(spec.argv))))

    def _bridged(self, argv: Sequence[str]) -> list[str]:
        # In bwrap's PID namespace the command dies with the bridge anyway; there the
        # command gets the sandbox's seccomp filter from the bridge (SandboxPolicy).
        boxed = self.inner.name == "bwrap"
        return bridge_argv(self.proxy.socket_path, argv, tie=not boxed,
                           seccomp=program() if boxed else None)

    def cancel_all(self) -> None:
        self.inner.cancel_all()

    def close(self) -> None:
        if isinstance(self.inner, BwrapRunner):
            self.inner.close()
        self.proxy.stop()
