"""The host as a sandboxed command sees it: the system read-only without `/etc`'s secrets,
and the places a program needs to start when it lives outside the system (a venv under
/tmp, a Python in a home folder).

Pure reads of the host (stat, readlink, a walk of /etc once per process); the bubblewrap
arguments are assembled by `kanban.tools.sandbox`.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import shutil
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kanban.state.sandbox_paths import SYSTEM_READ

# Secrets in /etc hidden whatever their mode; beside them, anything others cannot read.
ETC_SECRETS = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d",
               "ssh/ssh_host_*key", "ssl/private", "security/opasswd", "krb5.keytab")
MAX_ETC_ENTRIES = 20_000  # a walk this long is not a normal /etc: stop looking


@dataclass(frozen=True)
class SystemView:
    """The system folders bound read-only, merged-/usr links, and /etc's hidden entries."""

    binds: tuple[Path, ...]  # bound read-only at the same place
    links: tuple[tuple[str, Path], ...]  # (target, link): /bin -> usr/bin
    hidden_files: tuple[Path, ...]  # /dev/null bound over them
    hidden_dirs: tuple[Path, ...]  # an empty read-only tmpfs over them


@functools.cache
def system_view() -> SystemView:
    """This host's system view (computed once per process; a forkserver computes it for
    the workers it forks)."""
    binds: list[Path] = []
    links: list[tuple[str, Path]] = []
    for name in SYSTEM_READ:
        path = Path(name)
        if path.is_symlink():  # merged /usr: /bin -> usr/bin, the link and where it leads
            resolved = Path(os.path.realpath(path))
            if resolved.is_dir():
                links.append((os.readlink(path), path))
                if not any(resolved.is_relative_to(p) for p in SYSTEM_READ):
                    binds.append(resolved)
        elif path.is_dir():
            binds.append(path)
    binds += resolver_targets()
    files, dirs = etc_secrets(Path("/etc"))
    return SystemView(tuple(binds), tuple(links), files, dirs)


def resolver_targets(link: Path = Path("/etc/resolv.conf")) -> list[Path]:
    """/etc/resolv.conf when it links to a file outside the view (systemd's stub under /run):
    that one file, so names resolve with the network on."""
    if not link.is_symlink():
        return []
    target = Path(os.path.realpath(link))
    visible = any(target.is_relative_to(p) for p in SYSTEM_READ)
    return [] if visible or not target.is_file() else [target]


def etc_secrets(etc: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """(files, folders) of `etc` to hide: the named secrets, and whatever others cannot read
    (shadow is 0640 root:shadow; a key readable by its owner alone)."""
    files: list[Path] = []
    dirs: list[Path] = []
    for path, mode in _walk(etc):
        relative = str(path.relative_to(etc))
        named = any(fnmatch.fnmatchcase(relative, pattern) for pattern in ETC_SECRETS)
        if not named and mode & stat.S_IROTH:
            continue
        (dirs if stat.S_ISDIR(mode) else files).append(path)
    return tuple(files), tuple(dirs)


def _walk(top: Path) -> Iterator[tuple[Path, int]]:
    """Every entry under `top` (not through links) with its mode; hidden folders are not
    entered (their content goes with them)."""
    stack, seen = [top], 0
    while stack and seen < MAX_ETC_ENTRIES:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode) or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                continue
            yield Path(entry.path), mode
            relative = str(Path(entry.path).relative_to(top))
            secret = any(fnmatch.fnmatchcase(relative, p) for p in ETC_SECRETS)
            if stat.S_ISDIR(mode) and mode & stat.S_IROTH and not secret:
                stack.append(Path(entry.path))


def in_system(path: Path) -> bool:
    """Is `path` already visible in every sandbox (under /usr, /etc, /opt...)?"""
    view = system_view()
    shown = (*view.binds, *(link for _, link in view.links))
    return any(path == p or p in path.parents for p in shown)


@functools.cache
def own_interpreter() -> tuple[Path, ...]:
    """What this Python needs to start in a sandbox: its venv, its base installation and
    the folder its executable resolves into (tests and MCP servers run `sys.executable`).
    Computed once per process (a forkserver's workers inherit it), as the system view is."""
    places = [Path(sys.prefix), Path(sys.base_prefix),
              Path(os.path.realpath(sys.executable)).parent]
    return _outside_system(places)


def program_places(command: str, args: Iterable[str], path_env: str | None) -> tuple[Path, ...]:
    """What a command (an MCP server's) needs to start: the folder its executable sits and
    resolves in, a Python venv's folder and base installation, and script files named by
    absolute path among its arguments."""
    found = command if os.sep in command else shutil.which(command, path=path_env)
    places: list[Path] = []
    if found:
        for exe in dict.fromkeys((Path(os.path.abspath(found)),
                                  Path(os.path.realpath(found)))):
            places += [exe.parent, *_venv(exe)]
    places += [Path(a) for a in args if os.path.isabs(a) and os.path.isfile(a)]
    return _outside_system(places)


def _venv(executable: Path) -> list[Path]:
    """A venv's folder and its base Python's installation (pyvenv.cfg's `home` is its bin)."""
    prefix = executable.parent.parent
    cfg = prefix / "pyvenv.cfg"
    if not cfg.is_file():
        return []
    places = [prefix]
    try:
        lines = cfg.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return places
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and os.path.isabs(value.strip()):
            home = Path(os.path.realpath(value.strip()))
            places.append(home.parent if home.name == "bin" else home)
    return places


def _outside_system(places: Iterable[Path]) -> tuple[Path, ...]:
    """The places not already in the system view, without duplicates or ones inside others."""
    kept = sorted({p for p in places if p != Path("/") and not in_system(p)},
                  key=lambda p: len(p.parts))
    out: list[Path] = []
    for place in kept:
        if not any(place == o or o in place.parents for o in out):
            out.append(place)
    return tuple(out)
