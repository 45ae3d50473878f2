"""Starting worker processes: forked from a warm parent, or a plain interpreter."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import IO, Protocol

from kanban.state.errors import KanbanError
from kanban.worker import handoff

REPLY_S = 10.0  # a forkserver silent this long after a request is taken for hung


class SpawnError(KanbanError):
    """A worker process could not be started."""


@dataclass(frozen=True)
class SpawnRequest:
    env: Mapping[str, str]
    cwd: str
    log: str


class Spawner(Protocol):
    exits: queue.Queue[tuple[int, int]]

    def spawn(self, request: SpawnRequest) -> int: ...

    def close(self) -> None: ...


class ForkServerSpawner:
    """Workers forked from a pre-imported `worker.forkserver` process."""

    def __init__(self, base_env: Mapping[str, str], wake: threading.Event,
                 db_target: str | None = None, providers: Iterable[str] = ()) -> None:
        self.exits: queue.Queue[tuple[int, int]] = queue.Queue()
        self._wake = wake
        self._replies: dict[int, int] = {}
        self._cond = threading.Condition()
        self._next_id = 0
        self._send = threading.Lock()  # a request's descriptor and its line go together
        self._closing = False
        self._warming: str | None = None  # the model SDK the server is loading now
        self._heard = time.monotonic()  # when the server last said anything
        # credentials reach workers past the forkserver: pipes passed over this socket
        self._handoff, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "kanban.worker.forkserver",
                 ",".join(providers), str(theirs.fileno())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(base_env),
                start_new_session=True, pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        # The board's address goes on stdin, not the command line: a PostgreSQL URL may
        # carry a password, and any user on the host can read a process's command line.
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with suppress(OSError):  # it died at once: its missing line says so below
            self._proc.stdin.write(json.dumps({"db": db_target or ""}).encode() + b"\n")
            self._proc.stdin.flush()
        ready = self._proc.stdout.readline()
        if not ready:
            raise SpawnError("the worker forkserver failed to start (see stderr)")
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,),
                                         name="forkserver-reader", daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed server
            if not isinstance(message, dict):
                continue
            self._heard = time.monotonic()
            if "exit" in message:
                self.exits.put((message["exit"], message["code"]))
                self._wake.set()
            elif "warming" in message:  # loading a model SDK: replies wait for it
                with self._cond:
                    self._warming = message["warming"]
                    self._cond.notify_all()
            else:
                with self._cond:
                    self._replies[message["id"]] = message["pid"]
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()
        self._wake.set()  # end of its output: it exited (or was killed), the loop looks

    @property
    def pid(self) -> int:
        return self._proc.pid

    def lost(self) -> int | None:
        """The exit code (negative: the signal) of a server that died under us; None while
        it runs, or once its output was read to the end only because we closed it."""
        if self._closing or self._reader.is_alive():
            return None
        return self._proc.wait()

    def spawn(self, request: SpawnRequest) -> int:
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        env, credentials = handoff.split(request.env)
        line = json.dumps({"id": rid, "env": env, "cwd": request.cwd, "log": request.log,
                           "handoff": credentials is not None}) + "\n"
        try:
            with self._send:
                if credentials is not None:
                    handoff.pass_on(self._handoff, credentials)
                assert self._proc.stdin is not None
                self._proc.stdin.write(line.encode())
                self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise SpawnError(f"the worker forkserver is gone: {exc}") from None
        finally:
            if credentials is not None:
                os.close(credentials)  # the forkserver holds its own copy now
        return self._reply(rid)

    def _reply(self, rid: int) -> int:
        """The pid of request `rid`: within REPLY_S of the request or of the server's last
        word, whichever is later; never while it says it is loading a model SDK a card
        asked for (which may take longer). A wait that began while it was loading thus
        gets a full REPLY_S after it says it is done."""
        asked = time.monotonic()
        with self._cond:
            while rid not in self._replies and self.alive:
                quiet = time.monotonic() - max(asked, self._heard)
                if self._warming is None and quiet >= REPLY_S:
                    raise SpawnError("the worker forkserver did not answer")
                self._cond.wait(REPLY_S if self._warming is not None else REPLY_S - quiet)
            if rid not in self._replies:
                raise SpawnError("the worker forkserver exited")
            return self._replies.pop(rid)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        self._closing = True
        if self._proc.stdin is not None:
            with suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=2)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._handoff.close()


class SubprocessSpawner:
    """Each worker a fresh `python -m kanban.worker` (slower start; no warm parent)."""

    def __init__(self, wake: threading.Event) -> None:
        self.exits: queue.Queue[tuple[int, int]] = queue.Queue()
        self._wake = wake

    def spawn(self, request: SpawnRequest) -> int:
        os.makedirs(request.cwd, mode=0o700, exist_ok=True)
        fd = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "kanban.worker"], env=dict(request.env),
                cwd=request.cwd,
                stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
                umask=0o077,
            )
        except OSError as exc:
            raise SpawnError(f"cannot start a worker: {exc}") from None
        finally:
            os.close(fd)
        threading.Thread(target=self._wait, args=(proc,), daemon=True).start()
        return proc.pid

    def _wait(self, proc: subprocess.Popen[bytes]) -> None:
        self.exits.put((proc.pid, proc.wait()))
        self._wake.set()

    def close(self) -> None:
        pass
