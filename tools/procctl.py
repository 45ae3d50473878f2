"""What the kernel lets a process say about itself and its children (Linux; a no-op elsewhere):
non-dumpable, credentials out of its environment block, a child subreaper, a parent-death
signal, and the processes it adopted.

Knows nothing of cards: the dispatcher, the forkserver, the workers and the command runner
all use it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import time
from collections.abc import Callable, Iterable, MutableMapping
from contextlib import suppress
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
_PROC = Path("/proc")
_ENV_START_FIELD = 50  # /proc/PID/stat, counted from 1 (proc(5))
# A daemon's children are adopted when it dies: sweep again until none is left, for at most
# this long (a chain of processes, each waiting on the next, dies one generation a round).
SWEEP_S = 5.0
_LIBC: list[ctypes.CDLL | None] = []  # loaded once (in a forkserver: for all its workers)


def libc() -> ctypes.CDLL | None:
    if not _LIBC:
        try:
            _LIBC.append(ctypes.CDLL(None, use_errno=True)
                         if os.uname().sysname == "Linux" else None)
        except OSError:
            _LIBC.append(None)
    return _LIBC[0]


def _prctl(option: int, value: int) -> bool:
    lib = libc()
    if lib is None:
        return False
    with suppress(AttributeError):  # no prctl here: nothing more to do
        return bool(lib.prctl(option, value, 0, 0, 0) == 0)
    return False


def name_process(name: str) -> None:
    """This process's name in ps, top and /proc/PID/comm (at most 15 bytes are kept)."""
    lib = libc()
    if lib is not None:
        with suppress(AttributeError):
            lib.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def undumpable() -> None:
    """No other process of this user may read this one's memory or /proc/PID/environ, nor
    ptrace it (inherited by forks; an exec'ed program is dumpable again)."""
    _prctl(PR_SET_DUMPABLE, 0)


def become_subreaper() -> bool:
    """Orphans among this process's descendants are re-parented here, not to init; True
    when the kernel agreed."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def is_subreaper() -> bool:
    lib = libc()
    if lib is None:
        return False
    flag = ctypes.c_int(0)
    with suppress(AttributeError):
        if lib.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0:
            return flag.value != 0
    return False


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """In a forked child before exec: `sig` when the thread that forked us ends. The death
    signal survives exec; checking the parent afterwards closes the race with a parent that
    died before the call."""
    _prctl(PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:
        os._exit(1)


def seal_environment(environ: MutableMapping[str, str], secret: Callable[[str], bool]) -> None:
    """Credentials out of the environment block: unset at the C level (children started
    without an explicit environment do not inherit them) and overwritten in the memory the
    kernel shows as /proc/PID/environ. `environ` (Python's copy) keeps them for this
    process's own use; the process should be non-dumpable too."""
    names = [name for name in environ if secret(name)]
    for name in names:
        with suppress(OSError):
            os.unsetenv(name)
    if names:
        _scrub_block({name.encode() for name in names})


def _scrub_block(names: set[bytes]) -> None:
    """Zero the `NAME=value` entries of `names` in the block the process was started with."""
    if libc() is None:
        return
    try:
        fields = (_PROC / "self" / "stat").read_text().rsplit(")", 1)[1].split()
        start = int(fields[_ENV_START_FIELD - 3])
        end = int(fields[_ENV_START_FIELD - 2])
    except (OSError, IndexError, ValueError):
        return
    if not 0 < start < end:
        return
    block = ctypes.string_at(start, end - start)
    offset = 0
    for entry in block.split(b"\0"):
        if entry.split(b"=", 1)[0] in names:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot), or None if it is gone."""
    try:
        return int((_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(root: int, since: int) -> int:
    """How many processes (zombies too: they hold their pids) descend from `root` through a
    child of it started at or after `since` (clock ticks after boot): one read of every
    process's stat, whatever the depth of the tree."""
    below: dict[int, list[tuple[int, int]]] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            fields = (_PROC / entry.name / "stat").read_text().rsplit(")", 1)[1].split()
            below.setdefault(int(fields[1]), []).append((int(entry.name), int(fields[19])))
        except (OSError, IndexError, ValueError):
            continue  # gone since it was listed
    frontier = [pid for pid, start in below.get(root, ()) if start >= since]
    count = 0
    while frontier:
        count += 1
        frontier.extend(pid for pid, _ in below.pop(frontier.pop(), ()))
    return count


def children(parent: int | None = None) -> dict[int, int]:
    """The living or zombie children of `parent` (default: this process): pid -> start time
    (clock ticks after boot; with the pid it names a process). Read from the kernel's list
    of each thread's children (a few files), or where it has none, from every process's
    stat (a millisecond and more per hundred processes on the host, on each sweep)."""
    parent = os.getpid() if parent is None else parent
    listed = _listed_children(parent)
    if listed is None:
        return _scanned_children(parent)
    found: dict[int, int] = {}
    for pid in listed:
        try:
            fields = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone (and reaped) since it was listed
        if len(fields) > 19 and int(fields[1]) == parent:
            found[pid] = int(fields[19])
    return found


def _listed_children(parent: int) -> set[int] | None:
    """The pids in /proc/PARENT/task/*/children (a child is listed under the thread that
    forked it; an adopted orphan under the reaper's), None where the kernel keeps no such
    file. A child forked during the read may be missed: the next sweep finds it."""
    if not _children_files():
        return None
    try:
        tasks = os.listdir(_PROC / str(parent) / "task")
    except OSError:
        return None
    pids: set[int] = set()
    for task in tasks:
        try:
            pids.update(int(p) for p in
                        (_PROC / str(parent) / "task" / task / "children").read_text().split())
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return pids


@functools.cache
def _children_files() -> bool:
    """Whether this kernel lists a thread's children (CONFIG_PROC_CHILDREN)."""
    return (_PROC / "self" / "task" / str(os.getpid()) / "children").exists()


def _scanned_children(parent: int) -> dict[int, int]:
    found: dict[int, int] = {}
    try:
        entries = os.scandir(_PROC)
    except OSError:
        return found
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 19 and int(fields[1]) == parent:
                found[int(entry.name)] = int(fields[19])
    return found


def kill_adopted(known: Iterable[tuple[int, int]] | Callable[[int, int], bool], *,
                 reap: bool = True) -> int:
    """SIGKILL every child of this process that `known` does not name (pairs of pid and
    start time, or a predicate on them), with its process group when that group is none of
    ours; the number killed. Only a subreaper adopts: elsewhere its children are all its
    own. `reap`: wait for each and sweep again as their own children are adopted, until
    none is left (for at most SWEEP_S); without it (an event loop that reaps on SIGCHLD and
    sweeps again then), one round that never blocks."""
    is_known = known if callable(known) else _member(set(known))
    killed = 0
    deadline = time.monotonic() + SWEEP_S
    while True:
        found = children()
        strays = [pid for pid, start in found.items() if not is_known(pid, start)]
        kept = {_group(pid) for pid in found if pid not in strays} | {os.getpgrp()}
        for pid in strays:
            _kill_with_group(pid, kept)
        killed += len(strays)
        if not strays or not reap or time.monotonic() > deadline:
            break
        for pid in strays:
            _reap_by(pid, deadline)  # dead now; its children are ours from this moment
    return killed


def _reap_by(pid: int, deadline: float) -> None:
    """Wait for a killed child, but not past `deadline` (one the signal could not reach, a
    set-user-ID program's, must not hold the sweep for ever)."""
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] != 0:
                return
        except (ChildProcessError, OSError):
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.001)


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _kill_with_group(pid: int, kept: set[int | None]) -> None:
    """SIGKILL `pid` and, unless it is in a group of ours or of a process we keep, its whole
    process group in one stroke: a daemon's descendants that stayed in its group (a chain
    of forks, a process that forks and exits over and over) die at once, not one
    generation per sweep."""
    group = _group(pid)
    if group is not None and group not in kept:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    with suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _member(pairs: set[tuple[int, int]]) -> Callable[[int, int], bool]:
    return lambda pid, start: (pid, start) in pairs
