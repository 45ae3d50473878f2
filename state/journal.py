"""Which journal a SQLite board keeps: the write-ahead log where the filesystem supports it,
else the rollback journal, said once and plainly.

WAL needs shared memory (the `-shm` file, mapped by every process) and working POSIX locks.
On network filesystems (NFS, SMB/CIFS, 9p, sshfs and other FUSE mounts, WSL1's Windows
drives) SQLite either cannot enable it or, worse, enables it and corrupts the database
when two hosts use it. Such a board keeps the rollback journal: claims stay exact (every
write still takes SQLite's write lock), but readers wait for writers. SQLite records the
choice in the file itself (WAL is persistent; a board in rollback mode stays in it), so
every process that opens the board afterwards agrees without being told.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

# Filesystem types (as /proc/self/mountinfo names them) where WAL must not be used.
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "v9fs", "afs", "ceph", "glusterfs",
    "lustre", "gpfs", "ncpfs", "coda", "drvfs", "vboxsf", "vmhgfs", "fuse.sshfs",
    "fuse.rclone", "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs", "fuse.vmhgfs-fuse",
})
MOUNTINFO = Path("/proc/self/mountinfo")
WAL, ROLLBACK = "wal", "rollback"
JOURNAL_KEY = "journal"  # the setting a board in rollback mode carries
LOST = ("readers wait for writers; a board shared by several hosts belongs on PostgreSQL "
        "(see `kanban backup` and README's PostgreSQL section)")


@dataclass(frozen=True)
class Journal:
    """The journal in force and, when it is not WAL, why (one line for people)."""

    mode: str  # WAL | ROLLBACK
    reason: str = ""
    network_fs: str | None = None  # the filesystem type, when the board is on a network one

    @property
    def warning(self) -> str | None:
        if self.mode == WAL:
            return None
        return f"journal: rollback, not WAL ({self.reason}): {LOST}"


def choose_journal(raw: sqlite3.Connection, file: Path, *, wanted: str,
                   mount_table: Path = MOUNTINFO) -> Journal:
    """A new connection's journal: WAL where it is safe and works; else the rollback
    journal, with the reason. WAL is the file's own persistent state: a WAL board costs one
    pragma here. `wanted` is ROLLBACK when the board was made to keep it."""
    try:
        mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
    except sqlite3.OperationalError as exc:
        if not leave_unreadable_wal(raw, exc, file):
            raise
        return Journal(ROLLBACK, "SQLite cannot keep the write-ahead log on this "
                                 "filesystem (no shared memory); the board left it")
    remote = network_fs(str(file.parent), mount_table)
    if mode == WAL and remote is None:
        return Journal(WAL)
    if remote is not None:
        if mode == WAL:  # a board moved onto a network mount: leave WAL while we can
            raw.execute("PRAGMA journal_mode = DELETE")
        return Journal(ROLLBACK, f"the board is on a network filesystem ({remote})",
                       network_fs=remote)
    if wanted == ROLLBACK or _kept_rollback(raw):
        return Journal(ROLLBACK, "the board keeps the rollback journal (kanban init "
                                 "--journal rollback, or WAL did not work here)")
    if raw.execute("PRAGMA journal_mode = WAL").fetchone()[0] == WAL:
        return Journal(WAL)
    return Journal(ROLLBACK, "SQLite could not enable WAL on this filesystem (no shared "
                             "memory or locks)")


def _kept_rollback(raw: sqlite3.Connection) -> bool:
    """A board that chose the rollback journal says so in its settings (an old or copied
    file in rollback mode without it is switched to WAL, as before)."""
    try:
        row = raw.execute("SELECT value FROM setting WHERE key = ?", (JOURNAL_KEY,)).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # a new file: no tables yet
            return False
        raise  # busy (a writer commits in rollback mode): waited out by the caller, never
        # read as "no setting", which would switch a rollback board to WAL
    return row is not None and row[0] == ROLLBACK


def mount_type(path: Path, mountinfo: str | None = None) -> str | None:
    """The filesystem type of the mount holding `path` (Linux), else None."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None
    real = os.path.realpath(path)
    best, kind = "", None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        point = _unescape(fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, right.split()[0]
    return kind


@functools.cache
def network_fs(folder: str, table: Path = MOUNTINFO) -> str | None:
    """The network filesystem type `folder` sits on, per the mount `table`, or None (cached
    per process: a forkserver answers for every worker it forks)."""
    try:
        text = table.read_text()
    except OSError:
        return None
    kind = mount_type(Path(folder), text)
    return kind if kind in NETWORK_FILESYSTEMS else None


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def leave_unreadable_wal(raw: sqlite3.Connection, exc: sqlite3.OperationalError,
                          path: Path) -> bool:
    """A WAL file where the VFS has no shared memory cannot even be read (SQLITE_CANTOPEN,
    or an SHM I/O error): with the lock held exclusively SQLite keeps the WAL index in
    its own memory, long enough to switch the file to the rollback journal. False when
    that is not the trouble (the file opens, its header says WAL), or another process
    holds the board (then nothing changed)."""
    if not no_shared_memory(exc) or not _header_says_wal(path):
        return False
    try:
        raw.execute("PRAGMA locking_mode = EXCLUSIVE")
        left = raw.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
        raw.execute("PRAGMA locking_mode = NORMAL")
        raw.execute("SELECT count(*) FROM sqlite_master").fetchone()  # lets the lock go
    except sqlite3.Error:
        return False
    return bool(left == "delete")


def _header_says_wal(path: Path) -> bool:
    """Bytes 18 and 19 of a database file are 2 in WAL mode (False if it cannot be read:
    out of file descriptors, say, which SQLite reports as CANTOPEN too)."""
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == header[19] == 2


def no_shared_memory(exc: sqlite3.Error) -> bool:
    """The error SQLite gives reading a WAL file without shared memory."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code == _CANTOPEN or (code is not None and code & 0xFF == 10  # SQLITE_IOERR
                                 and code >> 8 in _SHM_IOERRS)


_CANTOPEN = 14
_SHM_IOERRS = (18, 19, 20, 21)  # SQLITE_IOERR_SHMOPEN, _SHMSIZE, _SHMLOCK, _SHMMAP
