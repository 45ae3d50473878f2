"""Which runner a card's commands and stdio MCP servers get: bubblewrap where it works,
else the plain runner (said in the run's events), or a refusal when the profile requires it."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.state.config import Config, Profile
from kanban.state.errors import ConfigError
from kanban.tools.procctl import become_subreaper, libc, seal_environment, undumpable
from kanban.tools.runner import PlainRunner, Runner, setpriv_pdeathsig
from kanban.tools.sandbox import (
    BwrapRunner,
    SandboxCheck,
    SandboxPolicy,
    check_sandbox,
    git_common_dir,
)
from kanban.tools.workbench import is_credential

MAX_ANCESTORS = 64  # a delegation chain is far shallower; this bounds a corrupt one
# The host's answer, probed once by a forkserver for the workers it forks (the probe
# starts bwrap: 10-25 ms per worker otherwise), with the PATH it was found on.
_host_check: tuple[str, SandboxCheck] | None = None


def probe_host() -> None:
    """Probe bwrap now (in a forkserver, before any fork) for every later worker."""
    global _host_check
    _host_check = (os.environ.get("PATH", ""), check_sandbox())
    libc()
    setpriv_pdeathsig()


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
                  home: Path) -> RunnerChoice:
    """bwrap around `base` when the profile allows it and bwrap works; ConfigError when the
    profile requires a sandbox that this host cannot give."""
    if profile.sandbox == "off" or not isinstance(base, PlainRunner):
        why = "sandbox = \"off\"" if profile.sandbox == "off" else "a custom runner"
        return RunnerChoice(base, f"commands run unsandboxed ({why})")
    check = host_check()
    if not check.available:
        if profile.sandbox == "required":
            raise ConfigError(f"profile {profile.name!r} has sandbox = \"required\" but "
                              f"{check.reason.split(';')[0]}")
        return RunnerChoice(base, f"no sandbox: {check.reason}")
    writable = [workspace]
    common = git_common_dir(workspace)
    if common is not None:
        writable.append(common)
    policy = SandboxPolicy(writable=tuple(writable), hidden=_hidden(home, workspace),
                           network=network)
    return RunnerChoice(BwrapRunner(policy, base),
                        f"sandbox: bwrap, network {'on' if network else 'off'}")


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
    started later inherits them by accident) and out of the environment block a cold worker
    was started with, and the process non-dumpable (another process of the same user can no
    longer read its memory or /proc/PID/environ, nor ptrace it). The worker is a child
    subreaper: what its commands leave behind is adopted by it and killed."""
    undumpable()
    seal_environment(environ, is_credential)
    for name in [n for n in environ if is_credential(n)]:
        del environ[name]
    become_subreaper()


__all__ = ["RunnerChoice", "card_network", "choose_runner", "harden", "host_check",
           "probe_host", "undumpable"]
