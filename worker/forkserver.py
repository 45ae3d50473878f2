"""A warm parent that forks workers with everything already imported.

Started by the dispatcher with a scrubbed environment (no credentials), it reads
one JSON spawn request per line on stdin and answers `{"id", "pid"}` on stdout;
when a worker exits it reports `{"exit": pid, "code": n}`. Each worker is a
full process: its own session and process group, its own cwd, log and
environment. EOF on stdin shuts the server down (workers keep running).

The server is non-dumpable and a child subreaper: what a dead worker leaves behind (the
commands it ran, their daemons) is re-parented here and killed at once.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import selectors
import signal
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import suppress
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NoReturn, cast

from kanban.tools.procctl import become_subreaper, kill_adopted, undumpable

if TYPE_CHECKING:
    from kanban.records import CardRecord
    from kanban.state.store import Conn, Database

EXIT_INTERNAL = 70
EXIT_INFRA = 74  # as worker/main.py: the host failed it
HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT})
SPARE_DELAY_S = 0.05  # quiet time after a spawn before the next spare is forked


def preload(db_target: str | None, providers: list[str]) -> Database | None:
    """Import what a worker needs and check its database, so a fork starts fast.

    Only the SDKs of `providers` are imported; a worker needing another imports it itself.
    No connection stays open: none may cross a fork.
    """
    import tomllib  # noqa: F401  (every worker reads its config: the last import after a fork)

    import kanban.agent.scripts  # noqa: F401
    import kanban.tools.catalog  # noqa: F401
    import kanban.worker.main  # noqa: F401
    from kanban import agent, toolsets
    from kanban.agent.user_hooks import hook_points
    from kanban.state import open_database
    from kanban.state.paths import DbLocation
    from kanban.tools.shellparse import bashlex
    from kanban.worker.sandboxing import probe_host

    agent.preload(providers)
    probe_host()
    bashlex()  # the command gate's parser: half a second of grammar tables, once
    # The installed plug-ins, scanned once here rather than in every worker (~30 ms each).
    hook_points()
    toolsets.plugins()
    if db_target is None:
        return None
    db = open_database(DbLocation(db_target, "env"))
    db.dispose()
    return db


def run_child(request: dict[str, Any], inherited: list[int], db: Database | None) -> None:
    """In the forked child: isolate, then run the worker; never returns."""
    code = EXIT_INTERNAL
    try:
        _isolate(inherited)
        code = _run_request(request, db)
    except BaseException as exc:  # noqa: BLE001 - every ending gets an exit code
        code = _failed(exc)
    finally:
        _exit(code)


def run_spare(read_fd: int, inherited: list[int], db: Database | None) -> None:
    """In a child forked ahead of need: isolate now, wait for a request on `read_fd`, then
    run it as `run_child` would; exits quietly when the forkserver closes the pipe unused.
    What a worker does before its card is known is thus off the dispatch path."""
    code = EXIT_INTERNAL
    try:
        _isolate(inherited)
        opened = _open_early(db)
        from kanban.agent import standby

        standby.start(2)  # the card's heartbeat and its model calls: threads already up
        request = _read_request(read_fd)
        if request is None:
            os._exit(0)
        if db is not None and opened is not None and not _same_file(db, opened):
            db.dispose()  # replaced or made read-only meanwhile: the worker opens it anew
        code = _run_request(request, db)
    except BaseException as exc:  # noqa: BLE001 - every ending gets an exit code
        code = _failed(exc)
    finally:
        _exit(code)


def _isolate(inherited: list[int]) -> None:
    """Whatever does not depend on the card: own session, private files, plain signals, no
    descriptor of the server's, and no other process of ours may read our memory."""
    os.setsid()
    os.umask(0o077)  # whatever the agent writes stays private to this user
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # not the server's request pipe: a worker never reads it
    os.close(null)
    for fd in inherited:
        if fd > 2:
            with suppress(OSError):
                os.close(fd)
    undumpable()  # before any credential reaches us


def _open_early(db: Database | None) -> tuple[int, int] | None:
    """Open the worker's connection before its card is known (the pragmas and the schema
    cost about a millisecond); the file's (device, inode), or None if it did not open."""
    if db is None or db.dialect != "sqlite":
        return None
    try:
        found = os.stat(db.target)
        with db.read() as conn:
            conn.scalar("SELECT count(*) FROM sqlite_master")  # the schema, read now
            with suppress(Exception):  # a speed-up only: never a reason not to start
                _rehearse_reads(conn)
    except Exception:  # noqa: BLE001 - the worker opens it itself and reports what fails
        db.dispose()
        return None
    return found.st_dev, found.st_ino


def _rehearse_reads(conn: Conn) -> None:
    """The reads a worker makes before its first model call, once, on no card: the
    connection the worker inherits then has their statements compiled, and this process
    has written to the pages of the code they run (copy-on-write faults taken now)."""
    from kanban.approvals import for_card
    from kanban.cards import card_attachments, get_card
    from kanban.claims import is_current
    from kanban.errors import CardNotFound
    from kanban.queries import subtree_cost
    from kanban.worker.resume import stored_conversation

    with suppress(CardNotFound):
        get_card(conn, 0)
    card_attachments(conn, 0)
    subtree_cost(conn, 0)
    for_card(conn, 0)
    is_current(conn, 0, "")
    no_card = SimpleNamespace(id=0, resume_base=0, waiting_on=None)  # finds no run
    stored_conversation(conn, cast("CardRecord", no_card), 0)


def _same_file(db: Database, opened: tuple[int, int]) -> bool:
    """Still the file the early connection opened, and still writable by us."""
    try:
        found = os.stat(db.target)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == opened and os.access(db.target, os.W_OK)


def _read_request(fd: int) -> dict[str, Any] | None:
    """The one request the server writes to a spare's pipe, or None at EOF without one."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    os.close(fd)
    data = b"".join(chunks)
    return json.loads(data) if data.strip() else None


def _run_request(request: dict[str, Any], db: Database | None) -> int:
    _redirect(request["log"])  # fds 0-2 now the worker's own
    os.makedirs(request["cwd"], mode=0o700, exist_ok=True)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    from kanban.worker.main import main

    if db is not None and request["env"].get("KANBAN_DB") != db_target(db):
        db.dispose()  # another database than ours: the worker opens its own
        db = None
    return main(db=db)


def _failed(exc: BaseException) -> int:
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else EXIT_INTERNAL
    code = EXIT_INTERNAL
    if isinstance(exc, OSError) and exc.errno in HOST_ERRNOS:
        code = EXIT_INFRA  # no space for its workspace or log: not the card's fault
    with suppress(OSError):
        traceback.print_exception(exc)
    return code


def _exit(code: int) -> NoReturn:
    try:
        with suppress(OSError):
            sys.stdout.flush()
            sys.stderr.flush()
    finally:
        os._exit(code)


def _redirect(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


class DispatcherGone(Exception):
    """Nobody reads our reports any more: the dispatcher died. Its workers run on (a new
    dispatcher requeues their cards); this server leaves without a word."""


class ForkServer:
    def __init__(self, stdin_fd: int, out_fd: int, db: Database | None, *,
                 spares: bool = True) -> None:
        self.db = db
        self.stdin_fd = stdin_fd
        self.out_fd = out_fd
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.buffer = b""
        self.spares = spares
        self.spare: tuple[int, int] | None = None  # (pid, write end of its request pipe)
        self.spare_pids: set[int] = set()  # spares not handed a request (yet)
        self.spare_due: float | None = None  # when to fork the next spare
        self.workers: set[int] = set()  # every child we forked and have not reaped

    def send(self, message: dict[str, Any]) -> None:
        try:
            os.write(self.out_fd, (json.dumps(message) + "\n").encode())
        except (BrokenPipeError, ConnectionResetError):
            raise DispatcherGone from None

    def serve(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        selector = selectors.DefaultSelector()
        selector.register(self.stdin_fd, selectors.EVENT_READ)
        selector.register(self.wake_r, selectors.EVENT_READ)
        self.send({"ready": True, "pid": os.getpid()})
        # Processes the preload started and left (the bwrap probe's), adopted by us as a
        # subreaper before SIGCHLD was ours to hear: collected now, not at the first exit.
        self._sweep()
        self._reap()
        self._new_spare()
        try:
            while True:
                events = selector.select(self._until_spare())
                for key, _ in events:
                    if key.fd == self.wake_r:
                        self._drain_wakeups()
                        self._sweep()  # a child exited: a dead worker's orphans are ours
                    elif not self._read_requests():
                        return
                if self._reap() or not events:
                    self._new_spare()  # a worker left or we were idle: the CPU is free
        finally:
            self.close_spare()

    def _until_spare(self) -> float | None:
        """How long select() may wait before a spare is due (None: no spare to make)."""
        if self.spare is not None or self.spare_due is None:
            return None
        return max(0.0, self.spare_due - time.monotonic())

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _read_requests(self) -> bool:
        data = os.read(self.stdin_fd, 65536)
        if not data:
            return False
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if line.strip():
                self._spawn(line)
        return True

    def _spawn(self, line: bytes) -> None:
        pid = self._hand_to_spare(line)  # as it came: the spare parses it itself
        request = json.loads(line)
        if pid is None:
            pid = self._fork(lambda: run_child(request, self._held(), self.db))
        self.send({"id": request["id"], "pid": pid})
        # Off the dispatch path now: what the next worker would do itself after its fork.
        from kanban.worker.warm import remember_config

        remember_config(request["env"].get("KANBAN_CONFIG", ""))
        # The next spare once the new worker is under way: forking now would take the CPU
        # it starts on (2 cores: the worker, the dispatcher and this fork all at once).
        self.spare_due = time.monotonic() + SPARE_DELAY_S

    def _held(self) -> list[int]:
        """Descriptors of ours that no child may keep."""
        fds = [self.stdin_fd, self.out_fd, self.wake_r, self.wake_w]
        return fds if self.spare is None else [*fds, self.spare[1]]

    def _fork(self, child: Callable[[], None]) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child()  # never returns
        self.workers.add(pid)
        return pid

    def _hand_to_spare(self, line: bytes) -> int | None:
        """The spare's pid once it has the request line; None without a (living) spare."""
        if self.spare is None:
            return None
        pid, fd = self.spare
        self.spare = None
        try:
            data = line + b"\n"
            while data:  # a full pipe blocks only until the spare reads it
                data = data[os.write(fd, data):]
        except OSError:  # it died waiting (killed by hand, the OOM killer): fork anew
            return None
        finally:
            os.close(fd)
        self.spare_pids.discard(pid)
        return pid

    def _new_spare(self) -> None:
        if self.spare is not None or not self.spares:
            return
        self.spare_due = None
        read, write = os.pipe()
        held = self._held()
        pid = self._fork(lambda: run_spare(read, [*held, write], self.db))
        os.close(read)
        self.spare = (pid, write)
        self.spare_pids.add(pid)

    def _reap(self) -> bool:
        """Report exited workers; True if any."""
        reported = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return reported
            if pid == 0:
                return reported
            if pid not in self.workers:  # adopted from a dead worker, killed by _sweep
                continue
            self.workers.discard(pid)
            if pid in self.spare_pids:  # a spare that never ran a card: nobody knows it
                self.spare_pids.discard(pid)
                if self.spare is not None and self.spare[0] == pid:
                    os.close(self.spare[1])
                    self.spare = None
                continue
            self.send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
            reported = True

    def _sweep(self) -> None:
        """Kill the processes a dead worker left to us (they are not workers of ours). Never
        blocks: `_reap` collects them, and their own children, adopted as they die, wake us
        for the next sweep."""
        kill_adopted(lambda pid, start: pid in self.workers, reap=False)

    def close_spare(self) -> None:
        """At shutdown: the spare reads EOF and leaves."""
        if self.spare is not None:
            os.close(self.spare[1])
            self.spare = None


def main() -> None:
    # The protocol owns the original stdout; stray prints go to stderr instead.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    undumpable()
    become_subreaper()
    args = sys.argv[1:]
    providers = args[1].split(",") if len(args) > 1 and args[1] else []
    db = preload(args[0] if args and args[0] else None, providers)
    gc.collect()
    gc.freeze()  # keep forked workers from copying pages the collector would touch
    with suppress(DispatcherGone):
        ForkServer(0, out_fd, db).serve()


def db_target(db: Database) -> str:
    return db.target


if __name__ == "__main__":
    main()
