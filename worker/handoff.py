"""Credentials handed to a forked worker past the forkserver, which never holds one.

The dispatcher writes a worker's credentials into a pipe of its own and names the pipe's
read end (`/proc/<dispatcher>/fd/<n>`) in the spawn request; the worker opens it, reads
them once (a pipe's data is gone when read) and the dispatcher closes its end when the
worker exits.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping

from kanban.tools.workbench import is_credential

HANDOFF_VAR = "KANBAN_CREDENTIALS_FROM"
PIPE_LIMIT = 60_000  # below a pipe's buffer: writing never blocks the dispatcher


class Handoffs:
    """The read ends the dispatcher holds: by spawn request until the worker's pid is known,
    then by pid until that worker exits."""

    def __init__(self) -> None:
        self._requested: dict[int, int] = {}  # spawn request id -> read end
        self._running: dict[int, int] = {}  # worker pid -> read end
        self._lock = threading.Lock()

    def split(self, env: Mapping[str, str]) -> tuple[dict[str, str], int | None]:
        """The environment without credentials (naming the pipe holding them) and the pipe's
        read end; the environment as it is when it holds none (or too many to hand off)."""
        secret = {k: v for k, v in env.items() if is_credential(k)}
        payload = json.dumps(secret).encode()
        if not secret or len(payload) > PIPE_LIMIT:
            return dict(env), None
        read, write = os.pipe()
        try:
            os.write(write, payload)
        finally:
            os.close(write)
        public = {k: v for k, v in env.items() if k not in secret}
        public[HANDOFF_VAR] = f"/proc/{os.getpid()}/fd/{read}"
        return public, read

    def expect(self, request_id: int, read: int | None) -> None:
        if read is not None:
            with self._lock:
                self._requested[request_id] = read

    def started(self, request_id: int, pid: int) -> None:
        """The forkserver answered (always before it reports that worker's exit)."""
        with self._lock:
            read = self._requested.pop(request_id, None)
            if read is not None:
                self._running[pid] = read

    def forget(self, request_id: int) -> None:
        """The request failed: no worker will read."""
        with self._lock:
            read = self._requested.pop(request_id, None)
        if read is not None:
            os.close(read)

    def release(self, pid: int) -> None:
        with self._lock:
            read = self._running.pop(pid, None)
        if read is not None:
            os.close(read)

    def close(self) -> None:
        with self._lock:
            reads = [*self._requested.values(), *self._running.values()]
            self._requested, self._running = {}, {}
        for read in reads:
            os.close(read)


def receive(env: dict[str, str]) -> None:
    """In the worker: put the handed-off credentials into `env` (a no-op without any)."""
    source = env.pop(HANDOFF_VAR, None)
    if not source:
        return
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return  # the dispatcher is gone: the worker fails on missing credentials, clearly
    try:
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    if chunks:
        env.update(json.loads(b"".join(chunks)))
