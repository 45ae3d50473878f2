"""One long-lived bubblewrap sandbox for a card's commands: the namespaces and mounts are
made once, and each command is forked inside by a small exec server (`sandbox_server`).

Starting bwrap costs 10-40 ms per command; a command in a live sandbox costs about what it
costs without one. The guarantees stay those of a sandbox per command: each command runs
in its own process group and session, under the same limits and deadline, and before its
result comes back every other process in the sandbox is dead (a daemon it left cannot see
the next command). The sandbox dies with the worker (`--die-with-parent`: bwrap's parent
is a thread of this session that lives as long as the sandbox) and when the runner closes.
Each command finds /tmp, /dev/shm and System V IPC as empty as in a fresh sandbox. The
server cannot be taken over by a command: it is not dumpable (no ptrace, no /proc/PID/mem,
no pidfd_getfd of its socket).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from kanban.tools.runner import KILL_GRACE_S, CommandResult, CommandSpec, watch
from kanban.tools.sandbox_server import SERVER

START_TIMEOUT_S = 10.0
FIRST_FREE_FD = 10  # descriptors below are the wrapped command's launchers' (tools.sandbox)
MAX_REQUEST = 150_000  # bytes: a SOCK_SEQPACKET message must fit the socket's buffer
LOST = "the command's sandbox stopped while it ran (run it again)"


class SessionLost(Exception):
    """The sandbox's server is gone; the runner falls back to a bwrap per command."""


class _Pending:
    """The command running in the session, awaited like a `subprocess.Popen`."""

    def __init__(self, session: SandboxSession, serial: bytes) -> None:
        self.session = session
        self.serial = serial
        self.reply: tuple[bytes, int, bool] | None = None  # kind, code or errno, swept

    def wait(self, timeout: float | None = None) -> int:
        if self.reply is None:
            self.reply = self.session.receive(self.serial, timeout)
        return self.reply[1]


class SandboxSession:
    """A sandbox kept alive by a thread; commands run in it one at a time."""

    def __init__(self, wrap: Callable[[Sequence[str]], list[str]]) -> None:
        self._wrap = wrap  # argv -> bwrap's argv (the runner's policy)
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._busy = threading.Lock()
        self._send = threading.Lock()
        self._serial = 0
        self._running: _Pending | None = None
        self._done = threading.Event()
        self.dead = False
        self.why = ""  # why start() failed, one line, for the worker's log
        self._stderr: IO[bytes] | None = None  # bwrap's and the server's own complaints

    def start(self) -> bool:
        """Start the sandbox and wait for its server; False (and dead) when it does not."""
        ours, low = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The server's end is passed at its number, above those the sandbox's launcher opens
        # on its way (the seccomp filter on 9: a socket there was replaced by the filter's
        # file, and the shared sandbox never started)
        theirs = socket.socket(fileno=fcntl.fcntl(low.fileno(), fcntl.F_DUPFD_CLOEXEC,
                                                  FIRST_FREE_FD))
        low.close()
        ready = threading.Event()
        threading.Thread(target=self._keep, args=(theirs, ready), name="sandbox-session",
                         daemon=True).start()
        ready.wait()
        theirs.close()
        if self._proc is None:
            ours.close()
            self.dead = True
            return False
        with self._send:
            self._sock = ours
        ours.settimeout(START_TIMEOUT_S)
        try:
            hello = ours.recv(64)
        except TimeoutError:
            hello, self.why = b"", f"its server did not answer within {START_TIMEOUT_S:.0f} s"
        except OSError as exc:
            hello = b""
            if not self.dead:  # dead: _keep closed it when the server ended, said below
                self.why = exc.strerror or str(exc)
        if hello != b"ready":
            self.close()
            self.why = self._complaint() or self.why or "its server ended before it answered"
            with self._send:  # (a server that ended at once was waited for before this was set)
                ours.close()
            return False
        self._forget_stderr()  # started: what it says from now on is not read
        return True

    def _forget_stderr(self) -> None:
        err, self._stderr = self._stderr, None
        if err is not None:
            err.close()

    def _complaint(self) -> str:
        """The last line bwrap or the server wrote before the sandbox failed to start, made
        safe to print (a shell's control characters escaped, at most 200 characters)."""
        err, proc = self._stderr, self._proc
        if err is None or proc is None:
            return ""
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(1.0)  # its last words are written before it exits
        lines: list[str] = []
        with contextlib.suppress(OSError):
            err.seek(0)
            lines = err.read(4096).decode(errors="replace").strip().splitlines()
        self._forget_stderr()
        return lines[-1].encode("unicode_escape").decode()[:200] if lines else ""

    def _keep(self, theirs: socket.socket, ready: threading.Event) -> None:
        """Start bwrap from this thread and outlive it: bwrap's death signal fires when the
        thread that started it ends, not only the worker."""
        fd = theirs.fileno()
        python = os.path.realpath(sys.executable)
        try:
            # Unlinked, closed by _forget_stderr once read or no longer needed.
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - outlives this call
            self._proc = subprocess.Popen(
                self._wrap([python, "-I", "-S", "-c", SERVER, str(fd)]), pass_fds=(fd,),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=self._stderr, env={}, process_group=0)
        except Exception as exc:  # noqa: BLE001 - start() waits on `ready`: it must be set
            why = exc.strerror if isinstance(exc, OSError) else None
            self.why = f"bwrap cannot start ({why or exc})"
            self._forget_stderr()
            ready.set()
            return
        ready.set()
        self._proc.wait()
        self.dead = True
        with self._send:  # nothing more is sent; a reader still waiting gets an error
            if self._sock is not None:
                self._sock.close()

    def bwrap_pid(self) -> int | None:
        """The pid of the bwrap that holds the sandbox (None before it started)."""
        proc = self._proc
        return proc.pid if proc is not None and not self.dead else None

    def run(self, spec: CommandSpec, argv: Sequence[str], env: Mapping[str, str],
            cancelled: Callable[[], bool]) -> CommandResult | None:
        """The command's result; None when the session cannot take it (busy with another
        command, too large a request, or gone): the caller runs it some other way."""
        request = _request(argv, spec.cwd, env)
        if self.dead or len(request) > MAX_REQUEST or not self._busy.acquire(blocking=False):
            return None
        try:
            return self._run(spec, request, cancelled)
        finally:
            self._busy.release()

    def _run(self, spec: CommandSpec, request: bytes,
             cancelled: Callable[[], bool]) -> CommandResult | None:
        started = time.monotonic()
        spec.output_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(spec.output_path, "wb") as out:
            if cancelled():  # as the plain runner: started and killed at once
                return CommandResult(None, spec.output_path, 0, 0.0, cancelled=True)
            pending = self._begin(request, out.fileno(), spec.stdin)
            if pending is None:
                return None
            if cancelled():  # cancelled while it started: cancel() may have missed it
                self._signal(pending.serial, signal.SIGKILL)
            try:
                code, timed_out, stopped = self._wait(pending, spec)
            except SessionLost:
                return CommandResult(None, spec.output_path, _size(spec.output_path),
                                     time.monotonic() - started, error=LOST)
            finally:
                self._running = None
        if pending.reply is not None and pending.reply[0] == b"e":
            return CommandResult(None, spec.output_path, 0, 0.0, error="cannot start the "
                                 f"command: {os.strerror(pending.reply[1])}")
        was_cancelled = cancelled()
        return CommandResult(None if code is not None and code < 0 and was_cancelled else code,
                             spec.output_path, _size(spec.output_path),
                             time.monotonic() - started, timed_out=timed_out,
                             cancelled=was_cancelled and (code is None or code < 0),
                             stopped=stopped)

    def _begin(self, request: bytes, out: int, stdin: bytes | None) -> _Pending | None:
        self._serial += 1
        serial = str(self._serial).encode()
        read_end, write_end = os.pipe() if stdin is not None else (-1, -1)
        fds = [out] + ([read_end] if stdin is not None else [])
        pending = _Pending(self, serial)
        self._done.clear()
        self._running = pending
        try:
            with self._send:
                assert self._sock is not None
                socket.send_fds(self._sock, [b"r\0" + serial + b"\0" + request], fds)
        except OSError:
            self._running = None
            self.close()
            return None
        finally:
            if stdin is not None:
                os.close(read_end)
        if stdin is not None:
            with contextlib.suppress(BrokenPipeError), open(write_end, "wb") as pipe:
                pipe.write(stdin)
        return pending

    def _wait(self, pending: _Pending, spec: CommandSpec
              ) -> tuple[int | None, bool, str | None]:
        """(exit code, timed out, the check's reason to stop it), as PlainRunner._wait."""
        deadline = time.monotonic() + max(0.0, spec.timeout_s)
        stopped = watch(pending, spec.check, deadline) if spec.check is not None else None
        if stopped is not None:
            self._stop(pending)
            return None, False, stopped
        try:
            code = pending.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._stop(pending)
            return None, True, None
        return code, False, None

    def receive(self, serial: bytes, timeout: float | None) -> tuple[bytes, int, bool]:
        """The server's answer about command `serial` (TimeoutExpired while it runs)."""
        assert self._sock is not None
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            # (a timeout of 0 would make the socket non-blocking: BlockingIOError)
            left = None if end is None else max(0.001, end - time.monotonic())
            self._sock.settimeout(left)
            try:
                data = self._sock.recv(4096)
            except TimeoutError:
                raise subprocess.TimeoutExpired("sandboxed command", timeout or 0.0) from None
            except OSError as exc:
                self.close()
                raise SessionLost(str(exc)) from exc
            if not data:
                self.close()
                raise SessionLost("the sandbox's server ended")
            fields = data.split(b"\0")
            if len(fields) >= 3 and fields[1] == serial:
                break
        swept = fields[0] == b"e" or fields[3:4] == [b"1"]
        if not swept:  # something in the sandbox would not die: end the sandbox itself
            self.close()
        self._done.set()
        return fields[0], int(fields[2]), swept

    def _stop(self, pending: _Pending) -> None:
        """SIGTERM the command's group, SIGKILL it after a grace period; the whole sandbox
        when even that goes unanswered. Called by the thread that runs the command."""
        for number in (signal.SIGTERM, signal.SIGKILL):
            self._signal(pending.serial, number)
            with contextlib.suppress(subprocess.TimeoutExpired):
                pending.wait(KILL_GRACE_S)
                return
        self.close()
        raise SessionLost("the command would not die")

    def cancel(self) -> None:
        """Kill the running command (from another thread), as PlainRunner.cancel_all."""
        pending = self._running
        if pending is None:
            return
        for number in (signal.SIGTERM, signal.SIGKILL):
            self._signal(pending.serial, number)
            if self._done.wait(KILL_GRACE_S):
                return
        self.close()

    def _signal(self, serial: bytes, number: int) -> None:
        with contextlib.suppress(OSError), self._send:
            if self._sock is not None:
                self._sock.send(b"k\0" + serial + b"\0" + str(int(number)).encode())

    def close(self) -> None:
        """End the sandbox and everything in it (bwrap's process group)."""
        self.dead = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)


def _request(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> bytes:
    fields = [os.fsencode(str(cwd)), str(len(argv)).encode(),
              *(os.fsencode(a) for a in argv),
              *(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items())]
    if any(b"\0" in f for f in fields):  # exec refuses these anyway; let Popen say why
        return b"\0" * (MAX_REQUEST + 1)
    return b"\0".join(fields)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
