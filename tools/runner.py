"""Running one shell command for an agent: in its workspace, bounded, killable as a group.

The runner knows nothing of agents or cards. A `CommandSpec` says what to run and within
which bounds; a runner returns a `CommandResult` whose whole output sits in a file (the
caller decides how much of it a model sees). `PlainRunner` isolates by process group and
rlimits; `kanban.tools.sandbox_runner.BwrapRunner` adds a bubblewrap sandbox around it.

Without a sandbox, a command still dies with the process that runs it: its first process
gets a parent-death signal, and when that process is a child subreaper (a worker is), the
daemons a command leaves behind (`setsid`, double forks) are adopted by it and killed as
the command ends. (A PID namespace per command would do it in one stroke, but only as root
or through a user namespace that changes who the command is; the subreaper works for every
user on every Linux, and bubblewrap already gives a PID namespace where it runs.)
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Protocol

from kanban.tools.procctl import (
    descendants,
    die_with_parent,
    is_subreaper,
    kill_adopted,
    start_time,
)

KILL_GRACE_S = 2.0
CHECK_AFTER_S = 0.1  # a command's `check` is first polled once it has run this long
CHECK_EVERY_S = 0.1  # then at this pace, slower when the check itself is costly:
CHECK_SHARE = 0.1  # at most this share of the time goes to checking (its CPU time)
CHECK_MAX_EVERY_S = 10.0


MAX_PROCESSES = 4096


@dataclass(frozen=True)
class Rlimits:
    """Per-command resource limits (None: inherit)."""

    cpu_s: int | None = 300
    file_size_bytes: int | None = 1 << 30
    # Per user, not per command: a backstop against fork bombs (not for root: the sandbox
    # counts its processes, kanban.tools.sandbox_watch).
    processes: int | None = MAX_PROCESSES
    address_space_bytes: int | None = None
    # No core dumps: where the host pipes them to a handler (systemd-coredump, apport) the
    # kernel starts it as root with the crashed process's memory and names, a reach outside
    # the sandbox for whatever a command makes crash. 1, not 0: the kernel's sign to skip
    # a pipe handler (0 only stops dumps to files), and below any dump's size.
    core_bytes: int | None = 1


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
    # Polled while the command runs (see CHECK_*): a reason it returns stops the command.
    check: Callable[[], str | None] | None = None

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
    stopped: str | None = None  # the spec's check stopped it, for this reason

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
             ("--nproc", limits.processes), ("--as", limits.address_space_bytes),
             ("--core", limits.core_bytes))
    flags = [f"{flag}={value}" for flag, value in pairs if value is not None]
    if flags and shutil.which("prlimit"):
        wrapped = ["prlimit", *flags, "--", *wrapped]
    return wrapped


TOO_MANY_PROCESSES = "the command runs more than"


class CountedRunner:
    """A plain runner whose commands are stopped past `most` processes: RLIMIT_NPROC counts
    all of a user's processes, and none of root's (a fork bomb would take every pid of the
    host). Counted
    while a command runs, from this process down through what it started since the
    command began (a subreaper adopts what escapes the command's group)."""

    def __init__(self, inner: PlainRunner, most: int) -> None:
        self.inner = inner
        self.most = most
        self.name = inner.name

    def run(self, spec: CommandSpec) -> CommandResult:
        check = spec.check

        def counted() -> str | None:
            pid = self.inner.running()
            since = start_time(pid) if pid is not None else None
            if since is not None:
                running = descendants(os.getpid(), since)
                if running > self.most:
                    return (f"{TOO_MANY_PROCESSES} {self.most:,} processes ({running:,} "
                            "counted: a fork bomb?)")
            return check() if check is not None else None

        return self.inner.run(replace(spec, check=counted))

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        return self.inner.wrap(argv, cwd)

    def cancel_all(self) -> None:
        self.inner.cancel_all()


class PlainRunner:
    """A process group per command, rlimits, a timeout, and no sandbox."""

    name = "plain"

    def __init__(self) -> None:
        self._live: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._cancelled = False
        self._on_cancel: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """`hook` is called by `cancel_all` (a sandbox's live session kills its command)."""
        with self._lock:
            self._on_cancel.append(hook)

    def running(self) -> int | None:
        """The pid of the command running now (commands run one at a time), if any."""
        with self._lock:
            return next(iter(self._live), None)

    def argv(self, spec: CommandSpec) -> list[str]:
        """What is executed: `spec.argv` within its limits and deadline."""
        return limit_argv(spec.argv, spec.rlimits, spec.timeout_s)

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        return list(argv)

    def run(self, spec: CommandSpec) -> CommandResult:
        started = time.monotonic()
        spec.output_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        adopter = is_subreaper()
        with open(spec.output_path, "wb") as out:
            if self.cancelled:  # never start one: a quick command would run to its end
                return CommandResult(None, spec.output_path, 0, 0.0, cancelled=True)
            try:
                proc = self._start(spec, out)
            except OSError as exc:
                return CommandResult(None, spec.output_path, 0, 0.0,
                                     error=f"cannot start the command: {exc.strerror}")
            began = start_time(proc.pid) if adopter else None
            with self._lock:
                self._live[proc.pid] = proc
                cancelled = self._cancelled
            if cancelled:
                kill_group(proc)
            try:
                code, timed_out, stopped = self._wait(proc, spec)
            finally:
                with self._lock:
                    self._live.pop(proc.pid, None)
                if began is not None:
                    self._sweep(began)
        size = spec.output_path.stat().st_size
        return CommandResult(code, spec.output_path, size, time.monotonic() - started,
                             timed_out=timed_out, cancelled=self._cancelled and code is None,
                             stopped=stopped)

    def _start(self, spec: CommandSpec, out: IO[bytes]) -> subprocess.Popen[bytes]:
        argv = self.argv(spec)
        death = _death_signal(argv)
        setpriv = setpriv_pdeathsig()
        return subprocess.Popen(
            [setpriv, "--pdeathsig", signal.Signals(death).name[3:], "--", *argv]
            if setpriv else argv,
            cwd=spec.cwd, env=dict(spec.env),
            stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, process_group=0, close_fds=True,
            # Python in the child between fork and exec: 20 ms more with a worker's heap.
            preexec_fn=None if setpriv else functools.partial(die_with_parent, os.getpid(),
                                                              death))

    def _sweep(self, began: int) -> None:
        """Kill what the command left behind and we adopted: children started since the
        command was (our own are older: commands run one at a time), bar another command
        still running."""
        with self._lock:
            running = set(self._live)
        kill_adopted(lambda pid, start: start < began or pid in running)

    def _wait(self, proc: subprocess.Popen[bytes], spec: CommandSpec
              ) -> tuple[int | None, bool, str | None]:
        """(exit code, timed out, the check's reason to stop it)."""
        if spec.stdin is not None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(spec.stdin)
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        deadline = time.monotonic() + max(0.0, spec.timeout_s)
        stopped = watch(proc, spec.check, deadline) if spec.check is not None else None
        if stopped is not None:
            kill_group(proc)
            return None, False, stopped
        try:
            code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return None, True, None
        # The shell may have exited while its children still run in the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return (None if code < 0 and self._cancelled else code), False, None

    def cancel_all(self) -> None:
        with self._lock:
            self._cancelled = True
            live = list(self._live.values())
            hooks = list(self._on_cancel)
        for proc in live:
            kill_group(proc)
        for hook in hooks:
            hook()


_SETPRIV: list[str | None] = []


def setpriv_pdeathsig() -> str | None:
    """util-linux `setpriv` when it can set a death signal (2.33+), found once per process
    (a forkserver finds it for its workers)."""
    if not _SETPRIV:
        found = shutil.which("setpriv")
        try:
            ok = found is not None and subprocess.run(
                [found, "--pdeathsig", "keep", "--", "true"], capture_output=True,
                timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        _SETPRIV.append(found if ok else None)
    return _SETPRIV[0]


def _death_signal(argv: Sequence[str]) -> int:
    """What the command's first process gets when the thread that started it ends (the
    death signal survives exec, not fork). Under `timeout` (prlimit execs it), SIGTERM: it
    passes the signal to the command's whole process group and SIGKILLs it after a grace
    period, and the command cannot ignore it there. Otherwise SIGKILL, since bash may trap
    SIGTERM. Either way what left the group is orphaned: the subreaper above (a forkserver)
    kills it."""
    first = argv[argv.index("--") + 1] if argv[:1] == ["prlimit"] else "".join(argv[:1])
    return signal.SIGTERM if first == "timeout" else signal.SIGKILL


class Waitable(Protocol):
    """A running command awaited like `subprocess.Popen` (TimeoutExpired while it runs)."""

    def wait(self, timeout: float | None = None) -> int: ...


def watch(proc: Waitable, check: Callable[[], str | None], deadline: float) -> str | None:
    """Poll `check` while the command runs (until `deadline`); its reason to stop, or None
    once the command exited or its time is up. A check that costs much CPU (a big
    workspace to walk) is polled less often. Its wall time does not count: on a busy host
    a cheap check waits for a CPU, and pacing by that let a flood of files write 150 MB
    past a 50 MB budget between two looks."""
    pause = CHECK_AFTER_S
    while (wait_s := min(pause, deadline - time.monotonic())) > 0:
        try:
            proc.wait(timeout=wait_s)
            return None
        except subprocess.TimeoutExpired:
            pass
        began = time.thread_time()
        reason = check()
        if reason is not None:
            return reason
        cost = time.thread_time() - began
        pause = min(CHECK_MAX_EVERY_S, max(CHECK_EVERY_S, cost / CHECK_SHARE))
    return None


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
