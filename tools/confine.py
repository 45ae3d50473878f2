"""Workspace confinement: a path an agent names, resolved inside its workspace or refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kanban.state.errors import KanbanError

MAX_PATH = 4096


class OutsideWorkspace(KanbanError):
    """A path that is absolute, climbs out, or leads out through a symlink."""


class NotAFile(KanbanError):
    """A directory, device, FIFO or socket where a regular file is needed."""


def inside(root: Path, name: str) -> Path:
    """`name` (relative to `root`) with every symlink resolved; refused unless it stays
    under `root`. The path need not exist yet."""
    if not name or len(name) > MAX_PATH or "\x00" in name:
        raise OutsideWorkspace("give a non-empty path relative to the workspace")
    if name.startswith(("/", "~")) or os.path.isabs(name):
        raise OutsideWorkspace(f"{name}: absolute paths are refused; paths are relative to "
                               "the workspace")
    real_root = root.resolve()
    target = (real_root / name).resolve()  # follows symlinks, also in missing tails
    if target != real_root and real_root not in target.parents:
        raise OutsideWorkspace(f"{name}: resolves outside the workspace; refused")
    return target


def shown(root: Path, path: Path) -> str:
    """A resolved path as the agent should see it: relative to the workspace."""
    relative = path.relative_to(root.resolve())
    return str(relative) if str(relative) != "." else "."


def regular_file(path: Path, name: str) -> os.stat_result:
    """The stat of an existing regular file; devices, FIFOs, sockets and folders refused."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise NotAFile(f"{name}: no such file") from None
    except OSError as exc:
        raise NotAFile(f"{name}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise NotAFile(f"{name} is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise NotAFile(f"{name} is not a regular file (device, FIFO or socket); refused")
    return info


def read_bytes(path: Path, name: str, cap: int) -> bytes:
    """A regular file's bytes, at most `cap` of them (larger files are refused)."""
    info = regular_file(path, name)
    if info.st_size > cap:
        raise NotAFile(f"{name} is {info.st_size:,} bytes; files over {cap:,} bytes are "
                       "refused (read a part with the terminal, e.g. head or sed -n)")
    # O_NONBLOCK: a FIFO swapped in after the check must not hang the worker.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotAFile(f"{name} is not a regular file; refused")
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


def write_text(path: Path, name: str, text: str, cap: int) -> int:
    """Write `text` atomically (temp file + rename); returns the bytes written."""
    data = text.encode("utf-8")
    if len(data) > cap:
        raise NotAFile(f"{name}: {len(data):,} bytes is over the {cap:,}-byte limit for a file")
    if path.exists() or path.is_symlink():
        regular_file(path, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else None
    temp = path.with_name(f".{path.name}.kanban-tmp-{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return len(data)
