"""Workspace confinement: the file tools' reads, writes and listings, each through the
descriptors a race-free walk (tools.beneath) opened, never through a path string again."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from kanban.state.beneath import (
    MAX_PATH,
    READ_ONLY_WHY,
    Found,
    GitInternals,
    NotAFile,
    OutsideWorkspace,
    ReadOnlyPlace,
    Wall,
    step,
)

__all__ = ["MAX_PATH", "Entry", "Found", "GitInternals", "NotAFile", "OutsideWorkspace",
           "ReadOnlyPlace", "Wall", "as_text", "entries", "read_at", "read_bytes", "regular",
           "write_from", "write_text"]

MAX_DEPTH = 64  # listing and searching go no deeper
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO swapped
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC               # in must not hang us


def regular(found: Found, name: str) -> os.stat_result:
    """The entry's stat when it is an existing regular file; else NotAFile."""
    info = found.info
    if info is None:
        raise NotAFile(f"{name}: no such file")
    return _regular(info, name)


def _regular(info: os.stat_result, name: str) -> os.stat_result:
    if stat.S_ISDIR(info.st_mode):
        raise NotAFile(f"{name} is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise NotAFile(f"{name} is not a regular file (device, FIFO or socket); refused")
    return info


def read_bytes(found: Found, name: str, cap: int) -> bytes:
    """A regular file's bytes, at most `cap` of them (larger files are refused)."""
    regular(found, name)
    return read_at(found.parent, found.name, name, cap)


def read_at(folder: int, entry: str, name: str, cap: int) -> bytes:
    """The bytes of `entry` in the folder descriptor `folder`: a regular file with one link,
    at most `cap` bytes, opened without following a symlink."""
    try:
        fd = os.open(entry, _READ, dir_fd=folder)
    except OSError as exc:
        raise NotAFile(f"{name}: {exc.strerror}; refused") from None
    try:
        info = _regular(os.fstat(fd), name)
        if info.st_nlink > 1:  # another name for it may be anywhere, outside the workspace too
            raise NotAFile(f"{name} has {info.st_nlink} hard links; a file linked from "
                           "elsewhere is not read by the file tools")
        if info.st_size > cap:
            raise NotAFile(f"{name} is {info.st_size:,} bytes; files over {cap:,} bytes are "
                           "refused (read a part with the terminal, e.g. head or sed -n)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(cap + 1)[:cap]
    finally:
        os.close(fd)


def as_text(data: bytes, name: str) -> str:
    """Text of a file, or refused when it looks binary."""
    if b"\x00" in data[:8192]:
        raise NotAFile(f"{name} looks binary; only text files are read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise NotAFile(f"{name} is not UTF-8 text; only text files are read") from None


def write_text(found: Found, name: str, text: str, cap: int) -> int:
    """Write `text` atomically (a temp file in the same folder, renamed over the entry: a
    hard link to the old file keeps its old content); returns the bytes written."""
    data = text.encode("utf-8")
    if len(data) > cap:
        raise NotAFile(f"{name}: {len(data):,} bytes is over the {cap:,}-byte limit for a file")
    write_from(found, name, io.BytesIO(data))
    return len(data)


def write_from(found: Found, name: str, source: BinaryIO) -> None:
    """Write what `source` holds to the entry, atomically; the mode of a file it replaces
    is kept. Never inside `.git`, never onto anything but a regular file."""
    if found.in_git:
        raise GitInternals(f"{name}: the file tools do not write inside .git (hooks, config "
                           "and refs are git's own); refused")
    if found.read_only:
        raise ReadOnlyPlace(f"{name}: {READ_ONLY_WHY}")
    mode = regular(found, name).st_mode & 0o777 if found.info is not None else None
    temp = f".{found.name[:200]}.kanban-tmp-{secrets.token_hex(4)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644, dir_fd=found.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            shutil.copyfileobj(source, f)
            if mode is not None:
                os.fchmod(f.fileno(), mode)
        os.replace(temp, found.name, src_dir_fd=found.parent, dst_dir_fd=found.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=found.parent)
        raise


@dataclass(frozen=True)
class Entry:
    """One entry met by a listing: `folder` is its folder's descriptor, open only while the
    listing is at it."""

    shown: str  # relative to the workspace
    name: str
    folder: int
    info: os.stat_result  # the entry itself, not what a symlink points at
    target: str | None  # a symlink's text

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.info.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.info.st_mode)


def entries(found: Found, hidden: frozenset[tuple[int, int]], *, recursive: bool,
            skipped: frozenset[str] = frozenset()) -> Iterator[Entry]:
    """Entries under a found folder in name order; symlinks are listed, never followed;
    hidden folders are neither listed nor entered; `skipped` names are listed, not entered."""
    if found.fd is None:
        return
    try:
        folder = os.open(".", _FOLDER, dir_fd=found.fd)
    except OSError:
        return
    yield from _entries(folder, found.parts, hidden, recursive, skipped, 0)


def _entries(folder: int, parts: tuple[str, ...], hidden: frozenset[tuple[int, int]],
             recursive: bool, skipped: frozenset[str], depth: int) -> Iterator[Entry]:
    try:
        names = sorted(e.name for e in os.scandir(folder))
        for entry_name in names:
            entry = _entry(folder, entry_name, parts, hidden)
            if entry is None:
                continue
            yield entry
            if recursive and entry.is_dir and entry_name not in skipped \
                    and depth < MAX_DEPTH:
                child = _subfolder(folder, entry_name, hidden)
                if child is not None:
                    yield from _entries(child, (*parts, entry_name), hidden, recursive,
                                        skipped, depth + 1)
    except OSError:
        return
    finally:
        os.close(folder)


def _entry(folder: int, name: str, parts: tuple[str, ...],
           hidden: frozenset[tuple[int, int]]) -> Entry | None:
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        target = os.readlink(name, dir_fd=folder) if stat.S_ISLNK(info.st_mode) else None
    except OSError:
        return None  # gone meanwhile
    if (info.st_dev, info.st_ino) in hidden:
        return None
    return Entry("/".join((*parts, name)), name, folder, info, target)


def _subfolder(folder: int, name: str, hidden: frozenset[tuple[int, int]]) -> int | None:
    """A readable descriptor of a real subfolder (not a symlink, not hidden), or None."""
    try:
        held = step(folder, name)
    except OSError:
        return None
    try:
        info = os.fstat(held)
        if not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) in hidden:
            return None
        return os.open(".", _FOLDER, dir_fd=held)
    except OSError:
        return None
    finally:
        os.close(held)
