"""Guarding SQLite's write-ahead log against being deleted while the database is in use.

Deleting `<db>-wal` under live processes splits the database: those that opened the log
before keep committing into the unlinked file, while a process that opens the database
after starts an empty log of its own although the shared index (`-shm`) still points into
the old one. It then reads pages that are not there, or writes frames nobody else sees,
and the next checkpoint copies the mix into the database file. SQLite cannot notice.

A long-running process (the dispatcher) holds a guard: an idle connection that keeps the
log open, and a second hard link to the log's inode beside it. A thread watches the log's
path; when the file is gone or replaced, it links the original back into place in one
atomic rename, every committed transaction in it kept. A connection that opened a log
other than the guarded one in between is refused by `check_connection` (a transient
fault: the caller waits and retries), so no process ever writes into a second log.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import suppress
from pathlib import Path

from kanban.state.errors import TransientDatabaseError
from kanban.state.host import is_same_process, process_start
from kanban.state.inotify import IN_CREATE, IN_DELETE, IN_MOVED_FROM, IN_MOVED_TO, Inotify
from kanban.state.sqlite_errors import WAL_MISSING

POLL_S = 0.02  # how often the guard looks at the log's path where inotify is missing
# With inotify the guard sleeps until a file of the folder is removed, moved or created,
# and looks anyway this often (a safety net): polling at POLL_S cost an idle dispatcher
# half a percent of a core.
SAFETY_POLL_S = 1.0  # (or poll_s, if longer)
_MASK = IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
RESTORED, FAILED = "restored", "failed"
_FDS = Path("/proc/self/fd")

Inode = tuple[int, int]  # (st_dev, st_ino)

__all__ = ["FAILED", "RESTORED", "WalGuard", "before_connect", "check_connection", "open_logs"]


def _inode(st: os.stat_result) -> Inode:
    return st.st_dev, st.st_ino


def _log_path(db: Path) -> str:
    return f"{os.path.realpath(db)}-wal"


def open_logs(db: Path) -> dict[int, Inode]:
    """This process's open descriptors of the database's log (Linux), by descriptor."""
    wal = _log_path(db)
    found: dict[int, Inode] = {}
    try:
        names = os.listdir(_FDS)
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(_FDS / name)
            if target == wal or target == f"{wal} (deleted)":
                found[int(name)] = _inode(os.stat(_FDS / name))
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor, too)
    return found


def _link_open_file(fd: int, dest: Path) -> None:
    """A new name for the file open as `fd` (linkat following the /proc link: plain
    link(2) would try to link the symbolic link itself)."""
    folder = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(_FDS / str(fd), dest.name, dst_dir_fd=folder, follow_symlinks=True)
    finally:
        os.close(folder)


def _guard_prefix(db: Path) -> str:
    return f".{db.name}.walguard."


def live_guards(db: Path) -> set[Inode]:
    """The logs that guards of live processes hold (a dead guard's link is ignored)."""
    db = Path(os.path.realpath(db))
    prefix = _guard_prefix(db)
    held: set[Inode] = set()
    try:
        entries = list(os.scandir(db.parent))
    except OSError:
        return held
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid, _, start = entry.name[len(prefix):].partition(".")
        if pid.isdigit() and start.isdigit() and is_same_process(int(pid), int(start)):
            with suppress(OSError):
                held.add(_inode(entry.stat(follow_symlinks=False)))
    return held


def _removed_error(db: Path) -> TransientDatabaseError:
    return TransientDatabaseError(
        f"the database's write-ahead log ({db}-wal) was removed while in use: not using "
        "it until it is back (a running dispatcher puts it back)", kind=WAL_MISSING)


def before_connect(db: Path) -> dict[int, Inode]:
    """Before opening a connection: refuse while a guard's log is missing from its place
    (SQLite would create an empty second log, and may rebuild the shared index from it);
    returns the logs open until now, for `check_connection`."""
    guarded = live_guards(db)
    if guarded:
        try:
            at_path = _inode(os.stat(_log_path(db)))
        except FileNotFoundError:
            raise _removed_error(db) from None
        if at_path not in guarded:
            raise _removed_error(db)
    return open_logs(db)


def check_connection(db: Path, before: dict[int, Inode]) -> None:
    """A connection just opened (`before`: the logs open until then): it must have the log
    every other process writes to. TransientDatabaseError if it opened another one."""
    mine = {ino for fd, ino in open_logs(db).items() if before.get(fd) != ino}
    if not mine:
        return  # no log opened (not in WAL mode yet), or not Linux
    try:
        at_path = _inode(os.stat(_log_path(db)))
    except FileNotFoundError:
        raise _removed_error(db) from None
    guarded = live_guards(db)
    if mine != {at_path} or (guarded and not mine <= guarded):
        raise _removed_error(db)


class WalGuard:
    """Keeps one database's log in place while this process runs (see the module's text)."""

    def __init__(self, db: Path, *, poll_s: float = POLL_S, watch_files: bool = True,
                 wake: threading.Event | None = None) -> None:
        self.db = Path(os.path.realpath(db))
        self.wal = _log_path(self.db)
        self.poll_s = poll_s  # without inotify (or watch_files=False): the only look
        self.watch_files = watch_files
        self.wake = wake  # set when there is something to say
        start = process_start(os.getpid())
        self.link = self.db.parent / f"{_guard_prefix(self.db)}{os.getpid()}.{start}"
        self._anchor: sqlite3.Connection | None = None
        self._anchor_fd = -1  # the anchor's descriptor of the log
        self._inode: Inode | None = None
        self._stop = threading.Event()
        self._stop_r, self._stop_w = -1, -1  # a pipe that ends the inotify wait at stop()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._notes: list[tuple[str, str]] = []  # (RESTORED | FAILED, line) for the owner
        self._failing = False  # a restore failed; said once until one works

    def start(self) -> WalGuard:
        """Open the anchor, link the log, start watching. Raises OSError or sqlite3.Error
        when the log cannot be guarded (the caller carries on without a guard)."""
        self._sweep_dead()
        before = open_logs(self.db)
        anchor = sqlite3.connect(self.db, isolation_level=None, check_same_thread=False)
        try:
            anchor.execute("PRAGMA journal_mode").fetchone()  # a read opens the log
            check_connection(self.db, before)
            fds = [fd for fd, ino in open_logs(self.db).items() if before.get(fd) != ino]
            if len(fds) != 1:
                raise OSError(f"cannot tell which descriptor holds {self.wal}")
            with suppress(FileNotFoundError):
                self.link.unlink()
            self._anchor_fd = fds[0]
            _link_open_file(fds[0], self.link)  # the anchor's own inode, whatever the path
            self._inode = _inode(os.stat(self.link))
        except BaseException:
            anchor.close()
            raise
        self._anchor = anchor
        self._stop_r, self._stop_w = os.pipe()
        # watching before start() returns: a removal right after it must not go unseen
        notify = self._inotify()
        self._thread = threading.Thread(target=self._watch, args=(notify,), name="wal-guard",
                                        daemon=True)
        self._thread.start()
        return self

    def take_notes(self) -> list[tuple[str, str]]:
        """Restorations and failures since the last call: (RESTORED | FAILED, one line)."""
        with self._lock:
            notes, self._notes = self._notes, []
        return notes

    def check(self) -> None:
        """Put the log back if it is gone or replaced (the watching thread calls this)."""
        try:
            if _inode(os.stat(self.wal)) == self._inode:
                if not self.link.exists():  # our link swept away: the log is still there
                    _link_open_file(self._anchor_fd, self.link)
                return
        except FileNotFoundError:
            pass
        except OSError as exc:
            self._note_failure(f"cannot look at the write-ahead log {self.wal}: {exc}")
            return
        tmp = f"{self.link}.restore"
        try:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            os.link(self.link, tmp)
            os.replace(tmp, self.wal)
        except OSError as exc:
            self._note_failure(f"the write-ahead log {self.wal} was removed and cannot be put "
                               f"back: {exc}")
            return
        with self._lock:
            self._failing = False
            self._notes.append((RESTORED, f"the write-ahead log {self.wal} was removed while "
                                "in use; put it back (no committed change lost)"))
        self._wake()

    def stop(self) -> None:
        self._stop.set()
        if self._stop_w >= 0:
            with suppress(OSError):
                os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in (self._stop_r, self._stop_w):
            with suppress(OSError):
                os.close(fd)
        self._stop_r = self._stop_w = -1
        with suppress(OSError):
            self.link.unlink()
        if self._anchor is not None:
            with suppress(sqlite3.Error):
                self._anchor.close()
            self._anchor = None

    def _watch(self, notify: Inotify | None) -> None:
        if notify is None:
            while not self._stop.wait(self.poll_s):
                self.check()
            return
        try:
            while not self._stop.is_set():
                notify.wait(max(self.poll_s, SAFETY_POLL_S), self._stop_r)
                if not self._stop.is_set():
                    self.check()
        finally:
            notify.close()

    def _inotify(self) -> Inotify | None:
        if not self.watch_files:
            return None
        try:
            return Inotify(self.db.parent, _MASK)
        except OSError:
            return None

    def _note_failure(self, text: str) -> None:
        with self._lock:
            if self._failing:
                return
            self._failing = True
            self._notes.append((FAILED, text))
        self._wake()

    def _wake(self) -> None:
        if self.wake is not None:
            self.wake.set()

    def _sweep_dead(self) -> None:
        """Links left by guards that died (SIGKILL): they hold a log nobody uses."""
        prefix = _guard_prefix(self.db)
        with suppress(OSError):
            for entry in os.scandir(self.db.parent):
                if not entry.name.startswith(prefix):
                    continue
                pid, _, rest = entry.name[len(prefix):].partition(".")
                start = rest.removesuffix(".restore")
                if not (pid.isdigit() and start.isdigit()
                        and is_same_process(int(pid), int(start))):
                    with suppress(OSError):
                        os.unlink(entry.path)
