"""The agent-skill folder's files, written without following a planted symlink.

Every step opens the next directory relative to one it already holds, with O_NOFOLLOW; a
file is written to a fresh temporary name (O_EXCL) and renamed into place within the same
directory, so a symlink at any step is refused and never written through. Kept small on
purpose: a race-free resolver shared with the file tools can replace `open_dir`.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from kanban.errors import ValidationError

AGENT_SKILLS = "agent-skills"  # beside the database: the skills agents write
ARCHIVE = ".archive"  # archived skills, inside AGENT_SKILLS
VERSIONS = ".versions"  # a skill's earlier SKILL.md files, inside its folder
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODE = 0o644  # never executable


class UnsafeSkillPath(ValidationError):
    """A symlink or other non-directory where the skill folder expects a directory."""


def open_dir(parent: int, name: str, *, create: bool = False) -> int:
    """The directory `name` inside the directory fd `parent` (a symlink refused)."""
    if create:
        with suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP (a symlink), ENOTDIR (a file)
        raise UnsafeSkillPath(f"{name!r} in the skill folder is not a plain directory "
                              f"({exc.strerror})") from None


@contextmanager
def agent_root(home: Path, *, create: bool = True) -> Iterator[int]:
    """The agent-skill folder beside the database, opened without following a symlink."""
    home_fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        root = open_dir(home_fd, AGENT_SKILLS, create=create)
    finally:
        os.close(home_fd)
    try:
        yield root
    finally:
        os.close(root)


@contextmanager
def opened(parent: int, parts: Sequence[str], *, create: bool = False) -> Iterator[int]:
    """The directory at `parts` below `parent`, each step refused if it is a symlink."""
    fd = os.dup(parent)
    try:
        for part in parts:
            inner = open_dir(fd, part, create=create)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def make_dir(parent: int, name: str) -> None:
    """A new directory; ValidationError if anything (a symlink too) already has the name."""
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        raise ValidationError(f"{name!r} already exists") from None


def write_file(directory: int, name: str, data: bytes) -> None:
    """`name` in `directory` replaced by `data` at once (temp file, then rename)."""
    temp = f".tmp-{secrets.token_hex(6)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 _FILE_MODE, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb", closefd=False) as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(fd, _FILE_MODE)  # whatever the umask: readable, never executable
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(temp, dir_fd=directory)
        raise
    os.close(fd)
    os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)


def new_file(directory: int, name: str, data: bytes) -> None:
    """A file that must not exist yet (an earlier version is never overwritten)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 _FILE_MODE, dir_fd=directory)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def read_file(directory: int, name: str, limit: int) -> bytes:
    """A regular file's bytes (a symlink, a FIFO or a device refused, never waited on);
    ValidationError past `limit`."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=directory)
    except OSError as exc:
        raise UnsafeSkillPath(f"cannot read {name!r} ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeSkillPath(f"cannot read {name!r} (not a regular file)")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValidationError(f"{name!r} is larger than {limit:,} bytes")
    return data


def read_skill_file(folder: Path, name: str, limit: int) -> bytes:
    """A file of the agent skill at `folder` (.kanban/agent-skills/NAME), `name` relative
    to it (a/b.md), read without following a symlink swapped in for the folder, a folder
    on the way or the file since it was listed."""
    *folders, base = name.split("/")
    with agent_root(folder.parent.parent, create=False) as root, \
            opened(root, [folder.name, *folders]) as directory:
        return read_file(directory, base, limit)


def move(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    """Rename an entry between two held directories (a symlink moves as itself)."""
    if _exists(dst_dir, dst):
        raise ValidationError(f"{dst!r} already exists")
    os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)


def _exists(directory: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def entries(directory: int) -> list[str]:
    return sorted(os.listdir(directory))
