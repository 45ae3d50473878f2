"""Race-free path resolution under a workspace: every component is opened relative to the
folder descriptor before it, never following a symlink in the kernel.

A symlink met on the way is read and walked by this module under the same rules (at most
`MAX_LINKS` of them, refused when it climbs out), so a folder swapped for a symlink between
two calls cannot redirect an open: what was opened is what is used. Each step is an
`openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` where the kernel has it, else an
`openat(O_NOFOLLOW)`. Every folder walked through is checked by (st_dev, st_ino) against
the hidden ones (the board's folder), so neither a symlink nor a bind mount dodges the check.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kanban.state.errors import KanbanError

MAX_PATH = 4096
MAX_LINKS = 40  # as the kernel's own bound on symlinks in one lookup
GIT = ".git"  # a repository's internals (hooks, config, info) or a `gitdir:` pointer file

_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_STEP_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class OutsideWorkspace(KanbanError):
    """A path that is absolute, climbs out, leads out through a symlink or into a hidden
    folder."""


class NotAFile(KanbanError):
    """A directory, device, FIFO or socket where a regular file is needed; a missing one."""


class ReadOnlyPlace(KanbanError):
    """A write into a place the sandbox shows read-only (the worker's own Python, a
    repository's git folder, a shell start-up file): code there runs outside the card."""


READ_ONLY_WHY = ("read-only for cards (the worker's own Python and venv, a repository's "
                 "git folder, shell start-up files and the profile's sandbox_read run or are "
                 "read outside the sandbox); refused")


class GitInternals(KanbanError):
    """A write into a `.git` folder or onto a `.git` file: git's own (hooks, config, info,
    a `gitdir:` pointer), never the file tools'."""


def in_git(parts: tuple[str, ...]) -> bool:
    """The rule for writes: no component of the resolved path is named `.git`."""
    return any(part.lower() == GIT for part in parts)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_OPENAT2: list[tuple[Any, int] | None] = []  # [(libc's syscall, number) or None], probed once


def _openat2() -> tuple[Any, int] | None:
    if not _OPENAT2:
        number = _SYS_OPENAT2.get(platform.machine())
        found: tuple[Any, int] | None = None
        if number is not None and os.uname().sysname == "Linux":
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                syscall = libc.syscall
                syscall.restype = ctypes.c_long
                found = (syscall, number)
            except (OSError, AttributeError):
                found = None
        _OPENAT2.append(found)
    return _OPENAT2[0]


def step(folder: int, name: str) -> int:
    """An O_PATH descriptor of `name` (one component) in `folder`, the entry itself if it is
    a symlink. OSError as the kernel says."""
    probe = _openat2()
    if probe is not None:
        syscall, number = probe
        how = _OpenHow(_STEP_FLAGS, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        fd = syscall(ctypes.c_long(number), ctypes.c_long(folder),
                     ctypes.c_char_p(os.fsencode(name)), ctypes.byref(how),
                     ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter refuses it
            raise OSError(code, os.strerror(code), name)
        _OPENAT2[0] = None  # the kernel lacks it: openat from now on
    return os.open(name, _STEP_FLAGS, dir_fd=folder)


@dataclass
class Found:
    """Where a path led: the folder holding it (a descriptor), its last name there, its
    path from the workspace with symlinks resolved, and the entry (None when missing).
    Owns its descriptors: close it (or use it in a `with`)."""

    parent: int
    name: str
    parts: tuple[str, ...]
    info: os.stat_result | None
    fd: int | None  # an O_PATH descriptor of the entry itself, when it exists
    _fds: list[int] = field(default_factory=list)
    read_only: bool = False  # the entry is, or lies in, one of the wall's read-only places

    @property
    def shown(self) -> str:
        """The path as the agent should see it: relative to the workspace."""
        return "/".join(self.parts) or "."

    @property
    def in_git(self) -> bool:
        """Is this inside (or is it) a `.git` folder or file?"""
        return in_git(self.parts)

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.pop())

    def __enter__(self) -> Found:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@dataclass(frozen=True)
class Wall:
    """A workspace and the folders hidden inside it (the board's), as the file tools see it."""

    root: Path
    hidden: tuple[Path, ...] = ()
    # Read, never written: what the sandbox binds read-only inside writable folders (a
    # repository's git folder, shell start-up files, the worker's own Python and venv)
    readonly: tuple[Path, ...] = ()

    def hidden_ids(self) -> frozenset[tuple[int, int]]:
        return _ids(self.hidden)

    def readonly_ids(self) -> frozenset[tuple[int, int]]:
        return _ids(self.readonly)

    def resolve(self, name: str, *, make_folders: bool = False) -> Found:
        """Walk `name` from the workspace. The last component need not exist; with
        `make_folders`, missing folders before it are made. OutsideWorkspace or NotAFile."""
        parts = _checked(name)
        root = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        walk = _Walk(root, str(self.root.resolve()), self.hidden_ids(), name, make_folders,
                     self.readonly_ids())
        try:
            return walk.run(parts)
        except BaseException:
            walk.close()
            raise


def _ids(paths: tuple[Path, ...]) -> frozenset[tuple[int, int]]:
    """(st_dev, st_ino) of each path that exists (following a symlink: what it names)."""
    ids = set()
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue  # not there: nothing to guard
        ids.add((info.st_dev, info.st_ino))
    return frozenset(ids)


def real_folder(root: Path, parts: list[str], mode: int = 0o700) -> int:
    """A descriptor (O_PATH) of `root/parts...`, each component made a real folder here:
    a symlink or file in the way is removed, never followed. For what kanban itself places
    in a workspace (a card's materials); the caller closes the descriptor."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if part in ("", ".", "..") or "/" in part:
                raise OutsideWorkspace(f"{part!r}: not a folder name")
            fd = _real_child(fd, part, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _real_child(folder: int, part: str, mode: int) -> int:
    """The folder `part` in `folder` (made, or put in place of what was there); closes
    `folder`."""
    try:
        for _ in range(3):  # a racing writer may put something back once or twice
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, mode, dir_fd=folder)
            child = step(folder, part)
            if stat.S_ISDIR(os.fstat(child).st_mode):
                return child
            os.close(child)
            os.unlink(part, dir_fd=folder)
        raise NotAFile(f"{part}: something keeps taking the place of the folder")
    finally:
        os.close(folder)


def _checked(name: str) -> list[str]:
    if not name or len(name) > MAX_PATH or "\x00" in name:
        raise OutsideWorkspace("give a non-empty path relative to the workspace")
    if name.startswith(("/", "~")) or os.path.isabs(name):
        raise OutsideWorkspace(f"{name}: absolute paths are refused; paths are relative to "
                               "the workspace")
    return _split(name)


def _split(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


class _Walk:
    """One resolution: a stack of open folders below the workspace's descriptor."""

    def __init__(self, root: int, real_root: str, hidden: frozenset[tuple[int, int]],
                 name: str, make_folders: bool,
                 readonly: frozenset[tuple[int, int]] = frozenset()) -> None:
        self.root, self.real_root, self.hidden = root, real_root, hidden
        self.readonly = readonly
        self.name, self.make_folders = name, make_folders
        self.stack: list[tuple[int, str]] = []  # (descriptor, name) of each folder below root
        self.links = 0

    @property
    def here(self) -> int:
        return self.stack[-1][0] if self.stack else self.root

    def run(self, parts: list[str]) -> Found:
        pending = list(reversed(parts))
        if not pending:  # the workspace itself
            return self._top()
        while pending:
            part = pending.pop()
            if part == "..":
                if not self.stack:
                    raise OutsideWorkspace(f"{self.name}: resolves outside the workspace; "
                                           "refused")
                os.close(self.stack.pop()[0])
                if not pending:  # ends on a folder reached by climbing
                    return self._climbed()
                continue
            fd = self._open(part, last=not pending)
            if fd is None:  # the last component does not exist
                return self._found(part, None, None)
            info = os.fstat(fd)
            if stat.S_ISLNK(info.st_mode):
                os.close(fd)
                pending.extend(reversed(self._link(part)))
                if not pending:
                    return self._climbed()
                continue
            if (info.st_dev, info.st_ino) in self.hidden:
                os.close(fd)
                raise OutsideWorkspace(f"{self.name}: the board's folder is not reachable "
                                       "from a card; refused")
            if not pending:
                return self._found(part, info, fd)
            if not stat.S_ISDIR(info.st_mode):
                os.close(fd)
                raise NotAFile(f"{self.name}: {part} is not a folder")
            self.stack.append((fd, part))
        raise AssertionError("unreachable")  # pragma: no cover

    def _open(self, part: str, *, last: bool) -> int | None:
        try:
            return step(self.here, part)
        except FileNotFoundError:
            if last:
                return None
            if not self.make_folders:
                raise NotAFile(f"{self.name}: no such file or folder") from None
        except OSError as exc:
            raise NotAFile(f"{self.name}: {exc.strerror}") from None
        if in_git((*(n for _, n in self.stack), part)):
            raise GitInternals(f"{self.name}: the file tools do not write inside .git; "
                               "refused")
        if self._in_read_only():
            raise ReadOnlyPlace(f"{self.name}: {READ_ONLY_WHY}")
        try:
            os.mkdir(part, 0o777, dir_fd=self.here)
        except FileExistsError:
            pass  # made meanwhile: opened (never followed) below
        except OSError as exc:
            raise NotAFile(f"{self.name}: cannot make folder {part}: {exc.strerror}") from None
        try:
            return step(self.here, part)
        except OSError as exc:
            raise NotAFile(f"{self.name}: {exc.strerror}") from None

    def _in_read_only(self, info: os.stat_result | None = None) -> bool:
        """Is the entry (`info`) or a folder walked through to it a read-only place?"""
        if not self.readonly:
            return False
        infos = [os.fstat(fd) for fd, _ in self.stack] + ([info] if info is not None else [])
        return any((i.st_dev, i.st_ino) in self.readonly for i in infos)

    def _link(self, part: str) -> list[str]:
        """The components a symlink stands for; an absolute one only when it points into the
        workspace (then the walk restarts at the workspace)."""
        self.links += 1
        if self.links > MAX_LINKS:
            raise OutsideWorkspace(f"{self.name}: too many symlinks; refused")
        try:
            target = os.readlink(part, dir_fd=self.here)
        except OSError as exc:
            raise NotAFile(f"{self.name}: {exc.strerror}") from None
        if not target.startswith("/"):
            return _split(target)
        if target != self.real_root and not target.startswith(self.real_root + "/"):
            raise OutsideWorkspace(f"{self.name}: resolves outside the workspace; refused")
        while self.stack:
            os.close(self.stack.pop()[0])
        return _split(target[len(self.real_root):])

    def _climbed(self) -> Found:
        """The walk ended on a folder already open on the stack (or the workspace)."""
        if not self.stack:
            return self._top()
        fd, part = self.stack.pop()
        return self._found(part, os.fstat(fd), fd)

    def _top(self) -> Found:
        """The workspace itself: its own parent, as far as the tools go."""
        return Found(self.root, ".", (), os.fstat(self.root), self.root, [self.root])

    def _found(self, part: str, info: os.stat_result | None, fd: int | None) -> Found:
        """Hand the parent's and the entry's descriptors to a Found; close the rest."""
        names = (*(n for _, n in self.stack), part)
        read_only = self._in_read_only(info)
        parent = self.here
        for held, _ in self.stack[:-1]:
            os.close(held)
        if self.stack:
            os.close(self.root)
        self.stack = []
        return Found(parent, part, names, info, fd, [parent] + ([fd] if fd is not None else []),
                     read_only)

    def close(self) -> None:
        for held, _ in self.stack:
            os.close(held)
        self.stack = []
        os.close(self.root)
