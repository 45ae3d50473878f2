"""What runs in a child the forkserver forked: isolating it from the server, a spare's wait
for its request, and the worker itself. Every path ends in `os._exit` with the worker's code.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import traceback
from contextlib import suppress
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NoReturn, cast

from kanban.tools.procctl import undumpable
from kanban.worker.handoff import HANDOFF_FD

if TYPE_CHECKING:
    from kanban.records import CardRecord
    from kanban.state.store import Conn, Database

EXIT_INTERNAL = 70
EXIT_INFRA = 74  # as worker/main.py: the host failed it
HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EIO, errno.EDQUOT})


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

        # The card's heartbeat: a thread already up. Model calls through the gateway need
        # none (a direct one starts its own).
        standby.start(1)
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
    """The one request the server writes to a spare's socket (with the descriptor of the
    worker's credential pipe, when it has one), or None at EOF without one."""
    chunks: list[bytes] = []
    passed: list[int] = []
    with socket.socket(fileno=fd) as channel:
        while True:
            chunk, fds, _flags, _address = socket.recv_fds(channel, 65536, 1)
            passed += fds
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                break
    data = b"".join(chunks)
    if not data.strip():
        for extra in passed:
            os.close(extra)
        return None
    request: dict[str, Any] = json.loads(data)
    if passed:
        request["env"][HANDOFF_FD] = str(passed[0])
    return request


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


def db_target(db: Database) -> str:
    return db.target
