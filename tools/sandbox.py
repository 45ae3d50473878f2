"""Commands in a bubblewrap sandbox: the policy, built in one place, and its runner.

Each command gets its own PID, IPC, UTS and mount namespaces and a minimal view of the
host: the system read-only (`/usr`, `/bin`, `/lib*`, `/opt`, `/etc` without its secrets), a
fresh `/proc` and `/dev`, a private `/tmp`, its own HOME, the workspace read-write, and
exactly the extra paths the policy lists. Homes, `/root`, `/run` (host sockets), `/var` and
the board's folder are not there. The network is on or off (off: no TCP, no abstract
Unix sockets of the host). Either way no command may make a Unix socket (a seccomp filter,
`kanban.tools.seccomp`): one in a granted folder, or an abstract one of the host's, would
answer it whatever the mounts say. Like `PlainRunner`, this knows nothing of agents or
cards.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kanban.tools.hostview import SystemView, own_interpreter, system_view
from kanban.tools.netns import (
    PROGRAMS,
    OwnNetwork,
    check_own_network,
    gated,
    launcher,
    resolver_bind,
)
from kanban.tools.runner import MAX_PROCESSES, CommandResult, CommandSpec, PlainRunner
from kanban.tools.sandbox_session import SandboxSession
from kanban.tools.sandbox_watch import watched
from kanban.tools.seccomp import program_file

PROBE_TIMEOUT_S = 10.0
SANDBOX_MODES = ("auto", "required", "off")
TMP = Path("/tmp")
SHM_BYTES = 64 << 20  # the sandbox's /dev/shm (semaphores, shared memory), as Docker sizes it
# Mounts made in order of depth; at one depth: read-only binds, then empty tmpfs and hidden
# files, then writable binds (a hidden folder may hold the workspace, or sit inside it),
# then the read-only overlays that protect parts of writable folders (read-only wins).
_RANK = {"--ro-bind": 0, "--tmpfs": 1, "--hide": 1, "--bind": 2, "--moved": 2, "--ro-over": 3}
# The wrapped command is a shell that execs bwrap (same pid, a millisecond): it makes the
# sandbox the first thing the kernel's OOM killer takes (a command that eats the host's
# memory dies before the dispatcher, its workers or the database do), sets RLIMIT_CORE to
# 1 for what the sandbox runs, MCP servers and git included (kanban.tools.runner.Rlimits:
# no core for a host's dump handler), and opens the seccomp filter's file on the
# descriptor bwrap reads it from.
SECCOMP_FD = 9
OOM_SCORE_ADJ = 1000
_LAUNCH = (f"echo {OOM_SCORE_ADJ} > /proc/self/oom_score_adj 2>/dev/null; "
           "prlimit --pid $$ --core=1:1 2>/dev/null; "
           f'[ -z "$0" ] || exec {SECCOMP_FD}<"$0" || exit 126; exec "$@"')


@dataclass(frozen=True)
class SandboxPolicy:
    """What a sandboxed command may touch: `writable` folders, `readable` ones (beside the
    system view), `readonly` ones (bound read-only over parts of writable folders: a
    repository's hooks and config; at the same path read-only wins), `hidden` ones (an
    empty read-only tmpfs over them), its own `home` (bound writable, HOME points there),
    whether it has a network (or only a proxy's socket), and the host's `system` view (by
    default the host's as it is when each sandbox starts: `hostview.system_view`)."""

    writable: tuple[Path, ...]
    hidden: tuple[Path, ...] = ()
    network: bool = True
    home: Path | None = None
    readable: tuple[Path, ...] = ()
    readonly: tuple[Path, ...] = ()
    # A card with a network list: no network of its own, but this proxy's folder (bound
    # read-only) reached through kanban.tools.netbridge.
    proxy_socket: Path | None = None
    # The private /tmp is memory: at most this many bytes of it (None: tmpfs's default, half
    # the RAM), where this bwrap can say so.
    tmp_bytes: int | None = None
    # ... and at most this many files and folders in it and /dev/shm together, counted while
    # a watched command runs (kanban.tools.sandbox_watch: no mount option bwrap takes says so).
    tmp_files: int | None = None
    # ... and at most this many processes at once (counted as tmp_files is), holding at
    # most this many bytes of private memory together (None: not counted).
    most_processes: int = MAX_PROCESSES
    most_memory: int | None = None
    # With a network: a namespace of its own, NATed by slirp4netns, where the host's own
    # services do not answer (kanban.tools.netns), wherever this host can make one; False:
    # the host's network (the profile's reach_host).
    own_network: bool = True
    # On its own network: whether private networks (a LAN's other machines, a cloud
    # network's) answer too (`[web] allow_private`); the host's own services never do.
    private_networks: bool = False
    # (folder, where the sandbox sees it), bound writable: a worktree card's own refs
    # (kanban.tools.worktree_refs.BranchMirror), with `after` run after each command and when the
    # card's sandbox ends (it copies the card's ref to the repository).
    moved: tuple[tuple[Path, Path], ...] = ()
    after: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    system: SystemView | None = field(default=None, repr=False)

    def view(self) -> SystemView:
        """The system view a sandbox starting now gets."""
        return self.system if self.system is not None else system_view()

    @property
    def filter_file(self) -> Path | None:
        """The seccomp filter bwrap loads (None: none here). A card with a network list
        has its bridge load it on the command instead: the bridge itself reaches the proxy
        through a Unix socket (kanban.tools.netbridge)."""
        return program_file() if self.proxy_socket is None else None

    def wrap(self, argv: Sequence[str], cwd: Path, bwrap: str = "bwrap",
             view: SystemView | None = None) -> list[str]:
        """`argv` as run inside the sandbox, starting in `cwd` (with `view` of the host, or
        the policy's)."""
        view = view or self.view()
        args = [trusted_program(bwrap), "--die-with-parent", "--new-session", "--unshare-pid",
                "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.network or self.proxy_socket is not None:
            args.append("--unshare-net")
        if os.geteuid() == 0:  # root in the sandbox must not remount its way out
            args += ["--cap-drop", "ALL"]
        args += _system_args(view)
        for path, kind in self._mounts(view):
            if kind == "--tmpfs" and path == TMP and self.tmp_bytes and sizes_tmpfs(bwrap):
                args += ["--size", str(self.tmp_bytes), kind, str(path)]
            elif kind == "--tmpfs":
                args += [kind, str(path)]
            elif kind == "--hide":
                args += ["--ro-bind", "/dev/null", str(path)]
            elif kind == "--ro-over":
                args += ["--ro-bind", str(path), str(path)]
            elif kind == "--moved":
                args += ["--bind", str(dict((t, f) for f, t in self.moved)[path]), str(path)]
            else:
                args += [kind, str(path), str(path)]
        own = own_network(bwrap) if (self.network and self.proxy_socket is None
                                     and self.own_network) else None
        resolver = resolver_bind(private=self.private_networks) \
            if own is not None and own.available else None
        if resolver is not None:  # over the host's: a resolver the namespace cannot reach
            args += ["--ro-bind", str(resolver[0]), str(resolver[1])]
        # /dev is a tmpfs too (half the RAM): read-only, but for a small /dev/shm of its own
        args += [*(["--size", str(min(self.tmp_bytes or SHM_BYTES, SHM_BYTES))]
                   if sizes_tmpfs(bwrap) else []), "--tmpfs", "/dev/shm"]
        for path in (*view.hidden_dirs, *self.hidden, Path("/dev")):  # read-only
            args += ["--remount-ro", str(path)]
        if self.home is not None:
            args += ["--setenv", "HOME", str(self.home)]
        seccomp = self.filter_file
        if seccomp is not None:
            args += ["--seccomp", str(SECCOMP_FD)]
        if own is None or own.programs is None:
            return ["/bin/sh", "-c", _LAUNCH, str(seccomp or ""), *args, "--chdir", str(cwd),
                    "--", *argv]
        return ["/bin/sh", "-c", _LAUNCH, str(seccomp or ""),
                *launcher(own.programs, [*args, "--chdir", str(cwd), "--", *gated(argv)],
                          private=self.private_networks)]

    def _mounts(self, view: SystemView) -> list[tuple[Path, str]]:
        """Every mount over the system view, parents before children."""
        writable = (*self.writable, *((self.home,) if self.home is not None else ()))
        mounts = [*((p, "--hide") for p in view.hidden_files),
                  *((p, "--tmpfs") for p in view.hidden_dirs),
                  (TMP, "--tmpfs"), *((p, "--tmpfs") for p in self.hidden),
                  *((p, "--ro-bind") for p in self.readable),
                  *((p.parent, "--ro-bind") for p in (self.proxy_socket,) if p is not None),
                  *((p, "--bind") for p in writable),
                  *((p, "--ro-over") for p in self.readonly),
                  *((target, "--moved") for _, target in self.moved)]
        return sorted(mounts, key=lambda m: (len(m[0].parts), _RANK[m[1]]))


def trusted_program(name: str) -> str:
    """`name` found on the absolute folders of this process's PATH (itself if none has it):
    the wrapped command starts in the workspace, and a relative entry of PATH there (".",
    an empty one) would find a `bwrap` the model wrote, to run its command unconfined."""
    if os.sep in name:
        return name
    path = os.pathsep.join(p for p in os.environ.get("PATH", os.defpath).split(os.pathsep)
                           if os.path.isabs(p))
    return shutil.which(name, path=path) or name


@functools.cache
def sizes_tmpfs(bwrap: str) -> bool:
    """Whether this bwrap takes `--size` for a tmpfs (0.7 and later)."""
    try:
        proc = subprocess.run([bwrap, "--help"], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in proc.stdout + proc.stderr


@functools.lru_cache(maxsize=8)
def _system_args(view: SystemView) -> tuple[str, ...]:
    """The system read-only, merged-/usr links, a fresh /proc and /dev."""
    args: list[str] = []
    for path in view.binds:
        args += ["--ro-bind", str(path), str(path)]
    for target, link in view.links:
        args += ["--symlink", target, str(link)]
    return (*args, "--proc", "/proc", "--dev", "/dev")


class BwrapRunner:
    """A `PlainRunner` (process group, rlimits, timeout) whose commands run in a sandbox:
    one sandbox kept alive for all of them (`SandboxSession`), or where it cannot start or
    has died, a fresh one per command. `wrap` (long-lived servers) always makes a fresh one."""

    name = "bwrap"
    own_pids = True  # bwrap --unshare-pid: a pid names one of the sandbox's own processes

    def __init__(self, policy: SandboxPolicy, inner: PlainRunner | None = None,
                 bwrap: str = "bwrap", *, session: bool = True) -> None:
        self.policy = policy
        self.inner = inner or PlainRunner()
        self.bwrap = bwrap
        self._lock = threading.Lock()
        self._session: SandboxSession | None = None
        self._session_view: SystemView | None = None  # what the session was started with
        # The session's server is this Python: only where the policy shows it.
        self._use_session = session and interpreter_visible(policy)
        self._said = False
        self.inner.on_cancel(self._cancel_session)

    def wrap(self, argv: Sequence[str], cwd: Path, view: SystemView | None = None) -> list[str]:
        return self.policy.wrap(argv, cwd, self.bwrap, view)

    def run(self, spec: CommandSpec) -> CommandResult:
        try:
            return self._run(spec)
        finally:
            self._after()

    def _after(self) -> None:
        if self.policy.after is not None:
            self.policy.after()

    def _run(self, spec: CommandSpec) -> CommandResult:
        session = self._live_session()
        if session is not None:
            env = dict(spec.env)
            if self.policy.home is not None:  # as bwrap's --setenv does per command
                env["HOME"] = str(self.policy.home)
            result = session.run(watched(spec, self.policy.tmp_files, session.bwrap_pid,
                                         most_processes=self.policy.most_processes,
                                         most_memory=self.policy.most_memory),
                                 self.inner.argv(spec), env, lambda: self.inner.cancelled)
            if session.dead:
                self._fall_back("the card's sandbox ended")
            if result is not None:
                return result
        view = self.policy.view()
        result = self._run_once(spec, view)
        if _mount_point_gone(result, view):  # /etc changed under it: again, as it is now
            result = self._run_once(spec, self.policy.view())
        return result

    def _run_once(self, spec: CommandSpec, view: SystemView) -> CommandResult:
        own = replace(spec, argv=tuple(self.wrap(spec.argv, spec.cwd, view)))
        return self.inner.run(watched(own, self.policy.tmp_files, self.inner.running,
                                      most_processes=self.policy.most_processes,
                                      most_memory=self.policy.most_memory))

    def _live_session(self) -> SandboxSession | None:
        with self._lock:
            if not self._use_session:
                return None
            if self._session is not None and self._session_view != self.policy.view():
                # /etc's secrets changed: a file to hide binds over nothing in the running
                # sandbox (a key written since shows there), so it ends, with what it runs
                old, self._session = self._session, None
                old.close()
                print("kanban: the host's /etc changed; the card's sandbox starts again",
                      file=sys.stderr, flush=True)
            if self._session is None:
                self._session, self._session_view = self._start_session()
                if self._session.dead:
                    self._use_session = False
                    self._say(f"the card's sandbox did not start ({self._session.why})")
                    return None
            return self._session

    def _start_session(self) -> tuple[SandboxSession, SystemView]:
        """The card's sandbox and the view it has; started again once where /etc changed
        while it started (a file to hide, gone before bwrap bound over it, fails it)."""
        for _ in range(2):
            view = self.policy.view()
            session = SandboxSession(functools.partial(self.wrap, cwd=Path("/"), view=view))
            if session.start() or self.policy.view() == view:
                break
        return session, view

    def _fall_back(self, why: str) -> None:
        with self._lock:
            self._use_session = False
        self._say(why)

    def _say(self, why: str) -> None:
        """Once, in the worker's log: commands go on sandboxed, each in its own bwrap."""
        if not self._said:
            self._said = True
            print(f"kanban: {why}; each command now starts its own bwrap (slower, as "
                  "sandboxed)", file=sys.stderr, flush=True)

    def _cancel_session(self) -> None:
        session = self._session
        if session is not None:
            session.cancel()

    def cancel_all(self) -> None:
        self.inner.cancel_all()

    def close(self) -> None:
        """End the card's sandbox (the run is over); later commands get a bwrap each."""
        with self._lock:
            session, self._session = self._session, None
            self._use_session = False
        if session is not None:
            session.close()
        self._after()


_NO_MOUNT_POINT = re.compile(rb"bwrap: Can't (?:create file at|mkdir) (/[^\n]*?): ")


def _mount_point_gone(result: CommandResult, view: SystemView) -> bool:
    """Whether bwrap stopped before the command because a file or folder it was to hide is
    no longer there (removed after the view was read)."""
    if result.exit_code != 1 or result.output_bytes > 4096:
        return False
    try:
        head = result.output_path.read_bytes()[:4096]
    except OSError:
        return False
    found = _NO_MOUNT_POINT.match(head)
    if found is None:
        return False
    path = Path(os.fsdecode(found.group(1)))
    return path in (*view.hidden_files, *view.hidden_dirs) and not os.path.lexists(path)


def bwrap_runner(runner: object) -> BwrapRunner | None:
    """The BwrapRunner inside `runner` (a ProxiedRunner or CountedRunner around one)."""
    inner = runner
    for _ in range(4):
        if isinstance(inner, BwrapRunner):
            return inner
        inner = getattr(inner, "inner", None)
    return None


def offline(runner: object) -> Callable[[Sequence[str], Path], list[str]]:
    """How `runner` starts a command of kanban's own that needs no network (git on a
    card's worktree): in the card's sandbox without one, where it has a sandbox (a network
    proxy's bridge or a network namespace of the card's own would only cost time)."""
    inner = bwrap_runner(runner)
    if inner is not None:
        bwrap, policy = inner.bwrap, replace(inner.policy, network=False, proxy_socket=None)
        return lambda argv, cwd: policy.wrap(argv, cwd, bwrap)
    return runner.wrap  # type: ignore[attr-defined]


def interpreter_visible(policy: SandboxPolicy) -> bool:
    """Whether this Python (what the session's server runs on) is readable in the sandbox."""
    view = policy.view()
    shown = (*view.binds, *policy.readable, *policy.writable)
    hidden = (*view.hidden_dirs, *policy.hidden)
    return all(any(place.is_relative_to(p) for p in shown)
               and not any(place.is_relative_to(h) for h in hidden)
               for place in own_interpreter())


@functools.cache
def own_network(bwrap: str = "bwrap") -> OwnNetwork:
    """Whether a sandbox with a network gets one of its own here (tried once: a sandbox
    that runs `true` on it)."""
    def probe(programs: tuple[str, str]) -> list[str]:
        plain = SandboxPolicy(writable=(), own_network=False).wrap(gated(["true"]), Path("/"),
                                                                   bwrap)
        return [*plain[:4], *launcher(programs, plain[4:])]  # inside the same /bin/sh launch

    return check_own_network([trusted_program(name) for name in PROGRAMS], probe)


def own_network_here() -> bool:
    """Whether a card's sandbox with a network gets one of its own on this host, as a worker
    here would find (tried once per process, and only where bwrap and slirp4netns are)."""
    return (shutil.which("slirp4netns") is not None and check_sandbox().available
            and own_network().available)


@dataclass(frozen=True)
class SandboxCheck:
    """Whether bubblewrap can sandbox commands on this host, and if not, why."""

    available: bool
    reason: str  # one line: what runs commands, or why not bwrap

    @property
    def runner_name(self) -> str:
        return "bwrap" if self.available else "plain"


@functools.cache
def check_sandbox(bwrap: str = "bwrap") -> SandboxCheck:
    """Is `bwrap` installed, and does it start a sandbox here (namespaces may be refused)?"""
    path = shutil.which(bwrap)
    if path is None:
        return SandboxCheck(False, "bwrap is not installed (Debian: apt-get install "
                                   "bubblewrap); commands run unsandboxed in process groups")
    probe = SandboxPolicy(writable=(), network=False).wrap(["true"], Path("/"), path)
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxCheck(False, f"bwrap does not start ({exc}); commands run unsandboxed")
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return SandboxCheck(False, f"bwrap cannot make a sandbox here ({detail}); "
                                   "commands run unsandboxed")
    return SandboxCheck(True, f"bwrap ({path}): own PID/IPC/mount namespaces, system "
                              "read-only, workspace and own HOME read-write")
