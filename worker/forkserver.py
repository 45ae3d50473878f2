"""A warm parent that forks workers with everything already imported.

Started by the dispatcher with a scrubbed environment (no credentials), it reads
one JSON spawn request per line on stdin and answers `{"id", "pid"}` on stdout;
when a worker exits it reports `{"exit": pid, "code": n}`. Each worker is a
full process: its own session and process group, its own cwd, log and
environment. EOF on stdin shuts the server down (workers keep running).
"""

from __future__ import annotations

import errno
import gc
import json
import os
import selectors
import signal
import sys
import traceback
from contextlib import suppress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kanban.state.store import Database

EXIT_INTERNAL = 70
EXIT_INFRA = 74  # as worker/main.py: the host failed it
HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT})


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

    agent.preload(providers)
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
        os.setsid()
        os.umask(0o077)  # whatever the agent writes stays private to this user
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        _redirect(request["log"])  # replaces fds 0-2 first, so closing the rest is safe
        for fd in inherited:
            if fd > 2:
                os.close(fd)
        os.makedirs(request["cwd"], mode=0o700, exist_ok=True)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from kanban.worker.main import main

        code = main(db=db if db is not None and request["env"]["KANBAN_DB"] == db_target(db)
                    else None)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_INTERNAL
    except OSError as exc:
        if exc.errno in HOST_ERRNOS:  # no space for its workspace or log: not the card's fault
            code = EXIT_INFRA
        with suppress(OSError):
            traceback.print_exc()
    except BaseException:
        with suppress(OSError):
            traceback.print_exc()
    finally:
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
    def __init__(self, stdin_fd: int, out_fd: int, db: Database | None) -> None:
        self.db = db
        self.stdin_fd = stdin_fd
        self.out_fd = out_fd
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.buffer = b""

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
        while True:
            for key, _ in selector.select():
                if key.fd == self.wake_r:
                    self._drain_wakeups()
                elif not self._read_requests():
                    return
            self._reap()

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
                self._spawn(json.loads(line))
        return True

    def _spawn(self, request: dict[str, Any]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(request, [self.stdin_fd, self.out_fd, self.wake_r, self.wake_w], self.db)
        self.send({"id": request["id"], "pid": pid})

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def main() -> None:
    # The protocol owns the original stdout; stray prints go to stderr instead.
    out_fd = os.dup(1)
    os.dup2(2, 1)
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
