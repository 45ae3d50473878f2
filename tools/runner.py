"""Running one shell command for an agent: in its workspace, bounded, killable as a group.

The runner knows nothing of agents or cards. A `CommandSpec` says what to run and within
which bounds; a runner returns a `CommandResult` whose whole output sits in a file (the
caller decides how much of it a model sees). `PlainRunner` isolates by process group and
rlimits; `kanban.tools.sandbox.BwrapRunner` adds a bubblewrap sandbox around it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

KILL_GRACE_S = 2.0


@dataclass(frozen=True)
class Rlimits:
    """Per-command resource limits (None: inherit)."""

    cpu_s: int | None = 300
    file_size_bytes: int | None = 1 << 30
    processes: int | None = 4096  # per user, not per command: a backstop against fork bombs
    address_space_bytes: int | None = None


@dataclass(frozen=True)
class CommandSpec:
    """One command: `argv` run in `cwd` with exactly `env`; output to `output_path`."""

    argv: Sequence[str]
    cwd: Path
    env: Mapping[str, str]
    timeout_s: float
    output_path: Path
    rlimits: Rlimits = field(default_factory=Rlimits)
    stdin: bytes | None = None  # None: stdin is closed (/dev/null)

    @classmethod
    def shell(cls, command: str, **kwargs: object) -> CommandSpec:
        """`bash -c command` (non-interactive, no profile files)."""
        return cls(argv=("bash", "--noprofile", "--norc", "-c", command), **kwargs)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CommandResult:
    exit_code: int | None  # None: killed before it exited by itself (timeout, cancel)
    output_path: Path
    output_bytes: int
    duration_s: float
    timed_out: bool = False
    cancelled: bool = False
    error: str | None = None  # the command could not be started

    def read_head_tail(self, cap: int) -> tuple[str, bool]:
        """The output as text, cut to about `cap` characters (head and tail kept)."""
        return head_tail(self.output_path, cap)


class Runner(Protocol):
    """Runs commands; `cancel_all` kills every command still running (card cancelled)."""

    name: str

    def run(self, spec: CommandSpec) -> CommandResult: ...

    def cancel_all(self) -> None: ...

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        """`argv` as this runner would start it in `cwd` (long-lived servers use it)."""
        ...


def limit_argv(argv: Sequence[str], limits: Rlimits, timeout_s: float) -> list[str]:
    """`argv` wrapped by prlimit and timeout (util-linux, coreutils): the limits and the
    deadline hold even if the worker that started the command is killed."""
    wrapped = list(argv)
    if shutil.which("timeout"):
        wrapped = ["timeout", "--kill-after", f"{KILL_GRACE_S:g}s",
                   f"{max(0.1, timeout_s) + KILL_GRACE_S:.1f}s", *wrapped]
    pairs = (("--cpu", limits.cpu_s), ("--fsize", limits.file_size_bytes),
             ("--nproc", limits.processes), ("--as", limits.address_space_bytes))
    flags = [f"{flag}={value}" for flag, value in pairs if value is not None]
    if flags and shutil.which("prlimit"):
        wrapped = ["prlimit", *flags, "--", *wrapped]
    return wrapped


class PlainRunner:
    """A process group per command, rlimits, a timeout, and no sandbox."""

    name = "plain"

    def __init__(self) -> None:
        self._live: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._cancelled = False

    def argv(self, spec: CommandSpec) -> list[str]:
        """What is executed: `spec.argv` within its limits and deadline."""
        return limit_argv(spec.argv, spec.rlimits, spec.timeout_s)

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        return list(argv)

    def run(self, spec: CommandSpec) -> CommandResult:
        started = time.monotonic()
        spec.output_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(spec.output_path, "wb") as out:
            try:
                proc = subprocess.Popen(
                    self.argv(spec), cwd=spec.cwd, env=dict(spec.env),
                    stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT, process_group=0, close_fds=True)
            except OSError as exc:
                return CommandResult(None, spec.output_path, 0, 0.0,
                                     error=f"cannot start the command: {exc.strerror}")
            with self._lock:
                self._live[proc.pid] = proc
                cancelled = self._cancelled
            if cancelled:
                kill_group(proc)
            try:
                code, timed_out = self._wait(proc, spec)
            finally:
                with self._lock:
                    self._live.pop(proc.pid, None)
        size = spec.output_path.stat().st_size
        return CommandResult(code, spec.output_path, size, time.monotonic() - started,
                             timed_out=timed_out, cancelled=self._cancelled and code is None)

    def _wait(self, proc: subprocess.Popen[bytes], spec: CommandSpec) -> tuple[int | None, bool]:
        if spec.stdin is not None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(spec.stdin)
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        try:
            code = proc.wait(timeout=max(0.0, spec.timeout_s))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return None, True
        # The shell may have exited while its children still run in the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return (None if code < 0 and self._cancelled else code), False

    def cancel_all(self) -> None:
        with self._lock:
            self._cancelled = True
            live = list(self._live.values())
        for proc in live:
            kill_group(proc)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command's process group, SIGKILL it after a grace period."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)


def head_tail(path: Path, cap: int) -> tuple[str, bool]:
    """A file's text, or its first and last cap/2 characters with a marker; (text, cut)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size <= cap:
            return f.read().decode("utf-8", "replace"), False
        half = max(1, cap // 2)
        head = f.read(half).decode("utf-8", "replace")
        f.seek(size - half)
        tail = f.read().decode("utf-8", "replace")
    marker = f"\n[... {size - 2 * half} bytes cut; the whole output is in {path} ...]\n"
    return head + marker + tail, True
