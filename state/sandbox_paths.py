"""What a card's sandbox shows: the system view every card reads, and a profile's own
`sandbox_read` / `sandbox_write` grants, checked when config.toml is read.

The bubblewrap arguments are built from this in `kanban.tools.sandbox`; `kanban context` and
`kanban status` print it. Nothing here touches the host beyond a few `stat` calls.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kanban.state.errors import ConfigError

# The system, read-only (those of them that exist here; `/etc` without its secrets).
SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc")
# Where host Unix sockets live: never bound for a card without the network.
SOCKET_DIRS = (Path("/run"), Path("/var/run"))
# The host's shared /tmp holds other programs' sockets (X11, tmux, ssh-agent, PostgreSQL on
# some systems): a card gets its own /tmp, and without the network none of those.
SHARED_TMP = (Path("/tmp"), Path("/var/tmp"))
TMP_SOCKETS = (".X11-unix", ".ICE-unix", ".XIM-unix", ".font-unix", "tmux-*", "ssh-*",
               "screen*", "uscreens", ".s.PGSQL.*", "mysql*.sock", "dbus-*", "gpg-*",
               "systemd-private-*")
NO_BWRAP = "bwrap is not installed on this host"


def grants(values: Any, key: str, where: str, *, folder: Path | None,
           network: object) -> tuple[str, ...]:
    """`sandbox_read` or `sandbox_write` as absolute paths (`~` is the real home); one-line
    ConfigError for anything else."""
    out = []
    for given in values:
        path = Path(os.path.expanduser(given))
        problem = _grant_problem(path, folder, network)
        if problem:
            raise ConfigError(f"{where}.{key}: {given!r} {problem}")
        out.append(str(path))
    return tuple(dict.fromkeys(out))


def _grant_problem(path: Path, folder: Path | None, network: object) -> str | None:
    if not path.is_absolute():
        return "is not an absolute path (start it with / or ~)"
    if ".." in path.parts or "\0" in str(path):
        return "must not contain '..'"
    if path == Path("/"):
        return "is the whole host; name the folders a card needs"
    if folder is not None and _within(path, folder.absolute()):
        return f"lies in the board's folder {folder}, which every card's sandbox hides"
    if network is not True and (any(_within(path, d) for d in SOCKET_DIRS) or _socket(path)
                                or _shared_tmp(path)):
        return ("is a host socket place; a profile without the network gets no host Unix "
                "sockets (give it network = true to reach it, or grant a folder of its own)")
    return None


def _which(name: str) -> str | None:
    import shutil  # here: `kanban status` reads this module, and shutil costs a millisecond

    return shutil.which(name)


def hidden_program(command: str | None, args: Sequence[str], folder: Path | None) -> str | None:
    """The program or script path of a stdio server that lies in the board's folder (which
    every sandbox hides, so it could not start there), or None."""
    if folder is None or not command:
        return None
    found = command if os.sep in command else _which(command)
    paths = [found, os.path.realpath(found)] if found else []
    paths += [a for a in args if os.path.isabs(a)]
    board = Path(os.path.realpath(folder))
    for path in paths:
        if _within(Path(os.path.realpath(path)), board):
            return str(path)
    return None


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _shared_tmp(path: Path) -> bool:
    """/tmp itself, or one of the places other programs keep their sockets in it."""
    if path in SHARED_TMP:
        return True
    parts = path.parts
    return len(parts) > 2 and Path(*parts[:2]) in SHARED_TMP and \
        any(fnmatch.fnmatchcase(parts[2], pattern) for pattern in TMP_SOCKETS)


def _socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


def card_home_path(home: Path, board: str, card_id: int) -> Path:
    """The folder a sandboxed card gets as HOME (inside the board's folder, bound alone)."""
    return home / "homes" / board / str(card_id)


def runs_commands(profile: Any) -> bool:
    """Does a card of `profile` start commands or stdio MCP servers (what the sandbox is for)?"""
    return any(t == "terminal" or t.startswith("mcp:") for t in profile.toolsets)


def reach(profile: Any, *, own_network: Callable[[], bool], card_home: Path | None = None,
          network: object = None, reach_host: bool | None = None,
          private_networks: bool = False) -> dict[str, Any]:
    """What a card of `profile` can read and write and its network, as `--json` shows it.
    `network`, `reach_host`: the card's own (its delegating cards' profiles narrow them);
    `own_network`: whether a sandbox's network can be its own here (asked only when it
    matters: kanban.tools.sandbox.own_network_here); `private_networks`: `[web]
    allow_private`, whether private networks answer on it."""
    network = network_value(profile.network if network is None else network)
    if profile.sandbox == "off" or (profile.sandbox == "auto" and _which("bwrap") is None):
        data = {"sandbox": profile.sandbox, "read": ["whatever the dispatcher's user can read"],
                "write": ["whatever the dispatcher's user can write"], "network": network,
                "host_services": network is True}
        if profile.sandbox == "auto":  # what this host would do; `kanban status` names
            data["unsandboxed"] = NO_BWRAP  # each live dispatcher's own answer
        return data
    own = f"HOME {card_home}" if card_home is not None else "HOME (the card's own)"
    system = [f"{p} (secrets hidden)" if p == "/etc" else p
              for p in SYSTEM_READ if os.path.lexists(p)]
    read = [*system, "/tmp (private)", own, "kanban's Python and its MCP servers' programs",
            *profile.sandbox_read]
    write = ["the card's workspace", "/tmp (private)", own, *profile.sandbox_write]
    host = profile.reach_host if reach_host is None else reach_host
    shares = network is True and (host or not own_network())
    return {"sandbox": profile.sandbox, "read": read, "write": write, "network": network,
            "host_services": shares, "reach_host": bool(host),
            "private_networks": network is True and (shares or private_networks)}


def own_network_likely() -> bool:
    """Whether a worker here would give a sandbox a network of its own, as `kanban status`
    tells without starting one (it loads no runtime): bwrap, slirp4netns and ip installed,
    /dev/net/tun there, and, for a user other than root, user namespaces open to users.
    `kanban context` and the worker try it."""
    return (os.path.exists("/dev/net/tun")
            and all(_which(name) for name in ("bwrap", "slirp4netns", "ip"))
            and (os.geteuid() == 0 or _users_make_namespaces()))


def _users_make_namespaces() -> bool:
    """Debian's switch for unprivileged user namespaces (absent elsewhere), and the limit
    on how many (0: none)."""
    for switch in ("/proc/sys/kernel/unprivileged_userns_clone",
                   "/proc/sys/user/max_user_namespaces"):
        try:
            if int(Path(switch).read_text().split()[0]) == 0:
                return False
        except (OSError, ValueError, IndexError):
            continue
    return True


def reach_lines(data: dict[str, Any]) -> list[str]:
    """`reach`'s answer as three lines: reads, writes, network."""
    why = "sandbox = \"off\"" if data["sandbox"] == "off" else data.get("unsandboxed")
    unsandboxed = f" (unsandboxed: {why})" if why else ""
    network = network_text(data["network"])
    if why and data["network"] is not True:  # no namespace to cut it: only web tools obey
        network = ("off" if data["network"] is False else network) + \
            " for the web tools; commands are not held to it"
    if data["network"] is True and not why:
        network += (" (the host's: its own services answer too, "
                    + ("reach_host" if data.get("reach_host") else
                       "no network of its own on this host") + ")"
                    if data.get("host_services") else
                    " (its own: this host's own services do not answer"
                    + ("; private networks do: [web] allow_private)"
                       if data.get("private_networks") else ", nor do private networks)"))
    return [f"reads: {', '.join(data['read'])}{unsandboxed}",
            f"writes: {', '.join(data['write'])}",
            f"network: {network}"]


def network_value(network: object) -> bool | list[str]:
    """The profile's network as given: true, false, or its list of hosts."""
    if isinstance(network, bool):
        return network
    return [str(h) for h in network] if isinstance(network, Sequence) else bool(network)


def network_text(network: object) -> str:
    """One line: on, off, or the hosts it may reach."""
    value = network_value(network)
    if isinstance(value, list):
        return "only " + ", ".join(value) if value else "off"
    return "on" if value else "off (no TCP, no host Unix sockets)"
