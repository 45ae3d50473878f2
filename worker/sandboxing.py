"""Which runner a card's commands and stdio MCP servers get: bubblewrap where it works,
else the plain runner (said in the run's events), or a refusal when the profile requires it."""

from __future__ import annotations

import os
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kanban.records import CardRecord
from kanban.service import Kanban
from kanban.state.config import Config, McpServer, Profile, WebSettings
from kanban.state.errors import ConfigError
from kanban.state.network import HostList, Network, intersect
from kanban.state.sandbox_paths import card_home_path
from kanban.tools.gitwall import card_wall
from kanban.tools.hostview import own_interpreter, program_places, system_view
from kanban.tools.netbridge import ProxiedRunner
from kanban.tools.netns import resolver_bind
from kanban.tools.netproxy import NetProxy
from kanban.tools.procctl import become_subreaper, libc, seal_environment, undumpable
from kanban.tools.runner import CountedRunner, PlainRunner, Runner, setpriv_pdeathsig
from kanban.tools.sandbox import SandboxCheck, SandboxPolicy, check_sandbox, own_network
from kanban.tools.sandbox_runner import BwrapRunner
from kanban.tools.workbench import is_credential
from kanban.tools.worktree_refs import branch_mirror, publish_or_say, seed
from kanban.workspaces import SCRATCH, Workspace

MAX_ANCESTORS = 64  # a delegation chain is far shallower; this bounds a corrupt one
# The host's answer, probed once by a forkserver for the workers it forks (the probe
# starts bwrap: 10-25 ms per worker otherwise), with the PATH it was found on.
_host_check: tuple[str, SandboxCheck] | None = None


def probe_host() -> None:
    """Probe bwrap now (in a forkserver, before any fork) for every later worker."""
    global _host_check
    _host_check = (os.environ.get("PATH", ""), check_sandbox())
    if _host_check[1].available and own_network().available:  # tried once
        for private in (False, True):  # its resolv.conf, made here once, not per worker
            resolver_bind(private=private)
    own_interpreter()  # and the system folders it is measured against
    system_view()  # /etc walked once here: a worker only checks its folders (hostview.ETC)
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
    # What the file tools may read but never write (Workbench.readonly): what the sandbox
    # binds read-only; without one, the worker's own Python (code there runs as the worker)
    readonly: tuple[Path, ...] = ()


def choose_runner(base: Runner, profile: Profile, *, network: Network, workspace: Path,
                  home: Path, checkout: Workspace | None = None,
                  web: WebSettings | None = None, card_home: Path | None = None,
                  servers: Sequence[McpServer] = (), reach_host: bool = False
                  ) -> RunnerChoice:
    """bwrap around `base` when the profile allows it and bwrap works; ConfigError when the
    profile requires a sandbox that this host cannot give, or when something its commands
    need to start lies in the board's folder, which the sandbox hides. `checkout`: the
    resolved workspace, whose recorded git folders (a worktree's) fix what git may write. A
    network list adds the worker's proxy (enforced only inside bwrap)."""
    proxy = None
    if isinstance(network, tuple):
        proxy = NetProxy(HostList(network, profile.network_hosts), web or WebSettings())
    if profile.sandbox == "off" or not isinstance(base, PlainRunner):
        why = "sandbox = \"off\"" if profile.sandbox == "off" else "a custom runner"
        return _unsandboxed(_counted(base, profile), proxy,
                            f"commands run unsandboxed ({why})")
    check = host_check()
    if not check.available:
        if profile.sandbox == "required":
            raise ConfigError(f"profile {profile.name!r} has sandbox = \"required\" but "
                              f"{check.reason.split(';')[0]}")
        return _unsandboxed(_counted(base, profile), proxy, f"no sandbox: {check.reason}")
    policy = card_policy(profile, network=network, workspace=workspace, home=home,
                         checkout=checkout, card_home=card_home, servers=servers,
                         proxy=proxy, reach_host=reach_host,
                         private_networks=(web or WebSettings()).allow_private)
    runner: Runner = BwrapRunner(policy, base)
    readonly = (*policy.readonly, *policy.readable)
    if proxy is None:
        return RunnerChoice(runner, f"sandbox: bwrap, {_network_note(policy)}", readonly)
    return RunnerChoice(ProxiedRunner(runner, proxy), "sandbox: bwrap, network only to "
                        f"{_listed(network)} through the worker's proxy", readonly)


def _network_note(policy: SandboxPolicy) -> str:
    if not policy.network:
        return "network off"
    if not policy.own_network:
        return "network on (the host's: reach_host)"
    own = own_network()
    if own.available:
        return ("network on (its own: this host's services do not answer"
                + ("" if policy.private_networks else ", nor do private networks") + ")")
    return f"network on (the host's: {own.reason.split(';')[0]})"


def _counted(base: Runner, profile: Profile) -> Runner:
    """Plain commands with their processes counted against the profile's max_processes
    (RLIMIT_NPROC is per user, and does not hold for root); in a sandbox the sandbox
    counts them (kanban.tools.sandbox_watch)."""
    if isinstance(base, PlainRunner):
        return CountedRunner(base, profile.max_processes)
    return base


def _unsandboxed(base: Runner, proxy: NetProxy | None, note: str) -> RunnerChoice:
    if proxy is None:
        return RunnerChoice(base, note, own_interpreter())
    return RunnerChoice(ProxiedRunner(base, proxy), f"{note}; the network list "
                        f"({_listed(proxy.hosts.patterns)}) is not enforced: commands are "
                        "pointed at the worker's proxy but may connect directly",
                        own_interpreter())


def _listed(patterns: Network) -> str:
    shown = patterns if isinstance(patterns, tuple) else ()
    return ", ".join(shown[:10]) + (f" and {len(shown) - 10} more" if len(shown) > 10 else "")


def card_policy(profile: Profile, *, network: Network, workspace: Path, home: Path,
                checkout: Workspace | None = None, card_home: Path | None = None,
                servers: Sequence[McpServer] = (), proxy: NetProxy | None = None,
                reach_host: bool = False, private_networks: bool = False) -> SandboxPolicy:
    """The wall of one card: its workspace, what its recorded git folders let a commit
    write (a worktree's), its own HOME and the profile's `sandbox_write` writable; a
    repository's hooks, config and start-up files in them read-only; the profile's
    `sandbox_read`, this Python and its MCP servers' programs readable; the board's folder
    hidden; the network on (its own, private networks in it with `private_networks`, or
    the host's with `reach_host`), off, or only the proxy's socket."""
    hidden = hidden_folders(home, workspace)
    granted = _existing(profile.sandbox_write)
    readable = [*_existing(profile.sandbox_read), *own_interpreter()]
    for server in servers:
        if server.command:
            readable += program_places(server.command, server.args, os.environ.get("PATH"))
    _refuse_hidden(profile, [*readable, *granted], hidden)
    git, branch = (checkout.git, checkout.branch) if checkout else (None, None)
    mirror = branch_mirror(home, git, branch) if git is not None and branch is not None \
        else None
    if mirror is not None:
        seed(mirror)
    wall = card_wall(workspace, git, branch, hidden=hidden,
                     scratch=checkout is not None and checkout.kind == SCRATCH,
                     refs=mirror.folder if mirror is not None else None)
    return SandboxPolicy(writable=(*wall.writable, *granted), hidden=hidden, moved=wall.moved,
                         after=partial(publish_or_say, mirror) if mirror is not None else None,
                         network=network is True, home=card_home,
                         readable=tuple(dict.fromkeys(readable)), readonly=wall.readonly,
                         proxy_socket=proxy.socket_path if proxy else None,
                         tmp_bytes=profile.max_workspace_bytes,
                         own_network=not reach_host, private_networks=private_networks,
                         tmp_files=profile.max_workspace_files,
                         most_processes=profile.max_processes,
                         most_memory=profile.max_memory_bytes)


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


def hidden_folders(home: Path, workspace: Path) -> tuple[Path, ...]:
    """What no card may reach, whatever runs it: the sandbox hides these from commands and
    the file tools (Workbench.hidden) refuse them. The board's folder (database, logs,
    config, other cards' workspaces), also when the workspace holds it (a `dir:` workspace
    of the project), unless the workspace is the folder itself."""
    home = home.resolve()
    if workspace.resolve() == home:
        return ()
    return (home,)


BOARD_FOLDERS = ("workspaces", "logs", "attachments", "skills")  # of the board's folder


def refuse_board_workspace(home: Path, workspace: Path) -> None:
    """A `dir:` workspace may hold the board's folder (hidden there) but may not be that
    folder nor lie in one of its own folders (other cards' workspaces, logs, stored
    attachments, skills): their files would be the card's to write. ConfigError."""
    home, workspace = home.resolve(), workspace.resolve()
    owned = [home / name for name in BOARD_FOLDERS]
    if workspace == home or any(p == workspace or p in workspace.parents for p in owned):
        raise ConfigError(f"workspace dir:{workspace} is the board's folder or one of its "
                          "own; a card may not work there")


def card_network(kb: Kanban, card: CardRecord, profile: Profile, config: Config) -> Network:
    """A card reaches what its profile and every delegating ancestor's profile allow: no
    network if one has none, else the hosts every list allows."""
    network: Network = profile.network
    for parent in _ancestor_profiles(kb, card, config):
        if network is False:
            break
        network = intersect(network, parent.network)
    return network


def card_reaches_host(kb: Kanban, card: CardRecord, profile: Profile, config: Config) -> bool:
    """Whether a card's sandbox shares the host's network (its own services answer): only
    when its profile and every delegating ancestor's say reach_host. A lead kept off them
    cannot reach them through a card it delegates."""
    return profile.reach_host and all(parent.reach_host
                                      for parent in _ancestor_profiles(kb, card, config))


def _ancestor_profiles(kb: Kanban, card: CardRecord, config: Config) -> Iterator[Profile]:
    """The profiles of the cards that delegated `card`, nearest first (a profile removed
    since is skipped: its children keep their own)."""
    parent_id, seen = card.parent_id, 0
    while parent_id is not None and seen < MAX_ANCESTORS:
        parent = kb.card(parent_id)
        with suppress(ConfigError):
            yield config.profile(parent.profile)
        parent_id, seen = parent.parent_id, seen + 1


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


__all__ = ["RunnerChoice", "card_network", "card_reaches_host", "choose_runner", "harden",
           "host_check", "probe_host", "undumpable"]
