"""Commands in a bubblewrap sandbox: the policy, built in one place, and its runner.

Each command gets its own PID, IPC, UTS and mount namespaces: the system read-only, the
workspace read-write, a private `/tmp`, the board's folder (database, logs, other cards'
workspaces) hidden, a fresh `/proc` that shows only the command's own processes, and the
network on or off. Like `PlainRunner`, this knows nothing of agents or cards.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kanban.tools.runner import CommandResult, CommandSpec, PlainRunner

PROBE_TIMEOUT_S = 10.0
SANDBOX_MODES = ("auto", "required", "off")


@dataclass(frozen=True)
class SandboxPolicy:
    """What a sandboxed command may touch: `writable` folders, `hidden` ones (an empty
    tmpfs over them), `readonly` ones (bound read-only: inside a writable folder, or
    holding writable ones), and whether it has a network. The deepest mount of a path
    wins; at the same path, read-only wins."""

    writable: tuple[Path, ...]
    hidden: tuple[Path, ...] = ()
    network: bool = True
    readonly: tuple[Path, ...] = ()
    # A card with a network list: no network of its own, but this proxy's folder (bound
    # read-only) reached through kanban.tools.netbridge.
    proxy_socket: Path | None = None

    def wrap(self, argv: Sequence[str], cwd: Path, bwrap: str = "bwrap") -> list[str]:
        """`argv` as run inside the sandbox, starting in `cwd`."""
        args = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid",
                "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        if not self.network or self.proxy_socket is not None:
            args.append("--unshare-net")
        if os.geteuid() == 0:  # root in the sandbox must not remount its way out
            args += ["--cap-drop", "ALL"]
        # Parents before children: a hidden folder may hold the workspace or sit inside it.
        mounts = [(Path("/tmp"), "--tmpfs"), *((p, "--tmpfs") for p in self.hidden),
                  *((p, "--bind") for p in self.writable),
                  *((p, "--ro-bind") for p in self.readonly),
                  *((p.parent, "--ro-bind") for p in (self.proxy_socket,) if p is not None)]
        order = ("--tmpfs", "--bind", "--ro-bind")
        for path, kind in sorted(mounts, key=lambda m: (len(m[0].parts), order.index(m[1]))):
            args += [kind, str(path)] if kind == "--tmpfs" else [kind, str(path), str(path)]
        for path in self.hidden:  # empty and read-only, once the binds inside it are made
            args += ["--remount-ro", str(path)]
        return [*args, "--chdir", str(cwd), "--", *argv]


class BwrapRunner:
    """A `PlainRunner` (process group, rlimits, timeout) whose commands run in a sandbox."""

    name = "bwrap"

    def __init__(self, policy: SandboxPolicy, inner: PlainRunner | None = None,
                 bwrap: str = "bwrap") -> None:
        self.policy = policy
        self.inner = inner or PlainRunner()
        self.bwrap = bwrap

    def wrap(self, argv: Sequence[str], cwd: Path) -> list[str]:
        return self.policy.wrap(argv, cwd, self.bwrap)

    def run(self, spec: CommandSpec) -> CommandResult:
        return self.inner.run(replace(spec, argv=tuple(self.wrap(spec.argv, spec.cwd))))

    def cancel_all(self) -> None:
        self.inner.cancel_all()


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
                              "read-only, workspace read-write")

