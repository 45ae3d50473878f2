"""Which runner a card's commands and stdio MCP servers get: bubblewrap where it works,
else the plain runner (said in the run's events), or a refusal when the profile requires it."""

from __future__ import annotations

import ctypes
import os
from collections.abc import MutableMapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.state.config import Config, McpServer, Profile
from kanban.state.errors import ConfigError
from kanban.state.sandbox_paths import card_home_path
from kanban.tools.hostview import own_interpreter, program_places
from kanban.tools.runner import PlainRunner, Runner
from kanban.tools.sandbox import (
    BwrapRunner,
    SandboxCheck,
    SandboxPolicy,
    check_sandbox,
    git_common_dir,
)
from kanban.tools.workbench import is_credential

PR_SET_DUMPABLE = 4  # <linux/prctl.h>
MAX_ANCESTORS = 64  # a delegation chain is far shallower; this bounds a corrupt one
# The host's answer, probed once by a forkserver for the workers it forks (the probe
# starts bwrap: 10-25 ms per worker otherwise), with the PATH it was found on.
_host_check: tuple[str, SandboxCheck] | None = None


def probe_host() -> None:
    """Probe bwrap now (in a forkserver, before any fork) for every later worker."""
    global _host_check
    _host_check = (os.environ.get("PATH", ""), check_sandbox())
    _libc()


def host_check() -> SandboxCheck:
    """The forkserver's probe when this worker has its PATH, else a probe of our own."""
    if _host_check is not None and _host_check[0] == os.environ.get("PATH", ""):
        return _host_check[1]
    return check_sandbox()


@dataclass(frozen=True)
class RunnerChoice:
    runner: Runner
    note: str  # one line for the worker's log and the run's events


def choose_runner(base: Runner, profile: Profile, *, network: bool, workspace: Path,
                  home: Path, card_home: Path | None = None,
                  servers: Sequence[McpServer] = ()) -> RunnerChoice:
    """bwrap around `base` when the profile allows it and bwrap works; ConfigError when the
    profile requires a sandbox that this host cannot give, or when something its commands
    need to start lies in the board's folder, which the sandbox hides."""
    if profile.sandbox == "off" or not isinstance(base, PlainRunner):
        why = "sandbox = \"off\"" if profile.sandbox == "off" else "a custom runner"
        return RunnerChoice(base, f"commands run unsandboxed ({why})")
    check = host_check()
    if not check.available:
        if profile.sandbox == "required":
            raise ConfigError(f"profile {profile.name!r} has sandbox = \"required\" but "
                              f"{check.reason.split(';')[0]}")
        return RunnerChoice(base, f"no sandbox: {check.reason}")
    policy = card_policy(profile, network=network, workspace=workspace, home=home,
                         card_home=card_home, servers=servers)
    return RunnerChoice(BwrapRunner(policy, base),
                        f"sandbox: bwrap, network {'on' if network else 'off'}")


def card_policy(profile: Profile, *, network: bool, workspace: Path, home: Path,
                card_home: Path | None, servers: Sequence[McpServer] = ()) -> SandboxPolicy:
    """The wall of one card: its workspace (and a worktree's shared git folder), its own
    HOME and the profile's `sandbox_write` writable; the profile's `sandbox_read`, this
    Python and its MCP servers' programs readable; the board's folder hidden."""
    hidden = _hidden(home, workspace)
    granted = _existing(profile.sandbox_write)
    readable = [*_existing(profile.sandbox_read), *own_interpreter()]
    for server in servers:
        if server.command:
            readable += program_places(server.command, server.args, os.environ.get("PATH"))
    _refuse_hidden(profile, [*readable, *granted], hidden)
    common = git_common_dir(workspace)
    writable = [workspace, *([common] if common is not None else []), *granted]
    return SandboxPolicy(writable=tuple(writable), hidden=hidden, network=network,
                         home=card_home, readable=tuple(dict.fromkeys(readable)))


def _existing(paths: Sequence[str]) -> list[Path]:
    """A profile's grants that exist on this host (a missing one is nothing to bind)."""
    return [Path(p) for p in paths if os.path.lexists(p)]


def _refuse_hidden(profile: Profile, paths: Sequence[Path], hidden: Sequence[Path]) -> None:
    for given in paths:
        path = Path(os.path.realpath(given))  # a link into the folder counts as inside it
        for folder in hidden:
            if path == folder or folder in path.parents:
                raise ConfigError(f"profile {profile.name!r}: {given} lies in the board's "
                                  f"folder {folder}, which the sandbox hides; move it out")


def card_home_dir(home: Path, board: str, card_id: int) -> Path:
    """The card's own HOME inside a sandbox: empty at first, kept across its attempts."""
    path = card_home_path(home, board, card_id)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _hidden(home: Path, workspace: Path) -> tuple[Path, ...]:
    """The board's folder (database, logs, config, other cards' workspaces), unless the
    workspace is the folder itself or holds it (a `dir:` workspace of the project)."""
    home = home.resolve()
    if workspace.resolve() == home:
        return ()
    return (home,)


def card_network(kb: Kanban, card: CardRecord, profile: Profile, config: Config) -> bool:
    """A card has a network only when its profile and every delegating ancestor's do."""
    if not profile.network:
        return False
    parent_id, seen = card.parent_id, 0
    while parent_id is not None and seen < MAX_ANCESTORS:
        parent = kb.card(parent_id)
        try:
            if not config.profile(parent.profile).network:
                return False
        except ConfigError:  # a profile removed since: its children keep their own
            pass
        parent_id, seen = parent.parent_id, seen + 1
    return True


def harden(environ: MutableMapping[str, str]) -> None:
    """Once the worker has copied its environment: credentials out of `environ` (so nothing
    started later inherits them by accident) and the process non-dumpable (another process
    of the same user can no longer read its memory or /proc/PID/environ, nor ptrace it)."""
    for name in [n for n in environ if is_credential(n)]:
        del environ[name]
    undumpable()


def undumpable() -> None:
    """This process non-dumpable (a forked worker is made so before its card is known)."""
    libc = _libc()
    if libc is None:
        return
    with suppress(AttributeError):  # no prctl here: nothing more to do
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


_LIBC: list[ctypes.CDLL | None] = []  # loaded once (in a forkserver: for all its workers)


def _libc() -> ctypes.CDLL | None:
    if not _LIBC:
        try:
            _LIBC.append(ctypes.CDLL(None, use_errno=True)
                         if os.uname().sysname == "Linux" else None)
        except OSError:
            _LIBC.append(None)
    return _LIBC[0]
