"""Commands in a bubblewrap sandbox: the policy, built in one place, and what this host
can sandbox (its runner is `kanban.tools.sandbox_runner`).

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
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kanban.tools.hostview import SystemView, system_view
from kanban.tools.netns import (
    PROGRAMS,
    OwnNetwork,
    check_own_network,
    gated,
    launcher,
    resolver_bind,
)
from kanban.tools.runner import MAX_PROCESSES
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
