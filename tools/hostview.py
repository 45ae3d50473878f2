"""The host as a sandboxed command sees it: the system read-only without `/etc`'s secrets,
and the places a program needs to start when it lives outside the system (a venv under
/tmp, a Python in a home folder).

Pure reads of the host (stat, readlink, walks of /etc); the bubblewrap arguments are
assembled by `kanban.tools.sandbox`.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kanban.state.sandbox_paths import SYSTEM_READ

# Secrets in /etc hidden whatever their mode; beside them, anything others cannot read.
ETC_SECRETS = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d",
               "ssh/ssh_host_*key", "ssl/private", "security/opasswd", "krb5.keytab")
_NAMED = re.compile("|".join(fnmatch.translate(p) for p in ETC_SECRETS))
MAX_ETC_ENTRIES = 20_000  # a walk this long is not a normal /etc: stop looking
# /etc is walked again when a folder in it changed (an entry added, removed or renamed moves
# its folder's mtime) and at least this often: a mode changed in place moves no folder's.
ETC_RECHECK_S = 10.0
# A folder changed this recently may change again within the same tick of the filesystem's
# clock without its mtime moving: /etc is walked again until it has been still this long.
RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class SystemView:
    """The system folders bound read-only, merged-/usr links, and /etc's hidden entries."""

    binds: tuple[Path, ...]  # bound read-only at the same place
    links: tuple[tuple[str, Path], ...]  # (target, link): /bin -> usr/bin
    hidden_files: tuple[Path, ...]  # /dev/null bound over them
    hidden_dirs: tuple[Path, ...]  # an empty read-only tmpfs over them


def system_view() -> SystemView:
    """This host's system view as it is now: the system folders are looked at once per
    process (a forkserver does it for the workers it forks), /etc's secrets whenever /etc
    changed (`EtcSecrets`): a key written there after kanban started is hidden too, and one
    removed no longer fails every sandbox on its missing mount point."""
    binds, links = _system_folders()
    files, dirs = ETC.current()
    return SystemView((*binds, *resolver_targets()), links, files, dirs)


@functools.cache
def _system_folders() -> tuple[tuple[Path, ...], tuple[tuple[str, Path], ...]]:
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
    return tuple(binds), tuple(links)


def resolver_targets(link: Path = Path("/etc/resolv.conf")) -> list[Path]:
    """/etc/resolv.conf when it links to a file outside the view (systemd's stub under /run):
    that one file, so names resolve with the network on."""
    if not link.is_symlink():
        return []
    target = Path(os.path.realpath(link))
    visible = any(target.is_relative_to(p) for p in SYSTEM_READ)
    return [] if visible or not target.is_file() else [target]


@dataclass(frozen=True)
class _Walked:
    files: tuple[Path, ...]
    dirs: tuple[Path, ...]
    folders: tuple[tuple[str, int], ...]  # (folder entered, its mtime before it was read)
    at: float
    racy: bool  # a folder's mtime was too recent to tell a later change by


class EtcSecrets:
    """The entries of an /etc to hide, kept between calls and walked again when a folder
    entered changed or the last walk is older than `recheck_s` (checking the folders costs a
    stat each: a few hundred microseconds, against ten milliseconds for a walk)."""

    def __init__(self, etc: Path, recheck_s: float = ETC_RECHECK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.etc = etc
        self.recheck_s = recheck_s
        self.clock = clock
        self._walked: _Walked | None = None
        self._lock = threading.Lock()

    def current(self) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        """(files, folders) to hide, as /etc is now."""
        walked = self._walked
        if walked is None or walked.racy or self.clock() - walked.at >= self.recheck_s \
                or any(_mtime(folder) != seen for folder, seen in walked.folders):
            with self._lock:  # one walk at a time; a thread that waited takes its result
                if walked is self._walked:
                    self._walked = _walk_etc(self.etc, self.clock())
                walked = self._walked
        assert walked is not None
        return walked.files, walked.dirs


def etc_secrets(etc: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """(files, folders) of `etc` to hide: the named secrets, and whatever others cannot read
    (shadow is 0640 root:shadow; a key readable by its owner alone)."""
    walked = _walk_etc(etc, 0.0)
    return walked.files, walked.dirs


def _walk_etc(etc: Path, at: float) -> _Walked:
    files: list[Path] = []
    dirs: list[Path] = []
    folders: list[tuple[str, int]] = []
    started = time.time_ns()
    for path, mode in _walk(str(etc), folders):
        relative = os.path.relpath(path, etc)
        if not _NAMED.match(relative) and mode & stat.S_IROTH:
            continue
        (dirs if stat.S_ISDIR(mode) else files).append(Path(path))
    racy = any(mtime >= started - RACY_NS for _, mtime in folders)
    return _Walked(tuple(files), tuple(dirs), tuple(folders), at, racy)


def _walk(top: str, folders: list[tuple[str, int]]) -> Iterator[tuple[str, int]]:
    """Every entry under `top` (not through links) with its mode; hidden folders are not
    entered (their content goes with them). Each folder entered goes in `folders` with its
    mtime taken before it is read: a change made while it is read moves it again."""
    stack, seen = [top], 0
    while stack and seen < MAX_ETC_ENTRIES:
        folder = stack.pop()
        folders.append((folder, _mtime(folder)))
        try:
            entries = list(os.scandir(folder))
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
            yield entry.path, mode
            if stat.S_ISDIR(mode) and mode & stat.S_IROTH \
                    and not _NAMED.match(os.path.relpath(entry.path, top)):
                stack.append(entry.path)


def _mtime(folder: str) -> int:
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return -1


ETC = EtcSecrets(Path("/etc"))


def in_system(path: Path) -> bool:
    """Is `path` already visible in every sandbox (under /usr, /etc, /opt...)?"""
    binds, links = _system_folders()
    shown = (*binds, *resolver_targets(), *(link for _, link in links))
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
