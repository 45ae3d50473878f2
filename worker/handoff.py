"""Credentials handed to a forked worker past the forkserver, which never reads them.

The dispatcher writes a worker's credentials into a fresh pipe and passes the pipe's read
end with the spawn request over a Unix socket (SCM_RIGHTS); the forkserver hands that
descriptor to the worker it forks (or to the spare that takes the request) and closes its
own copy; the worker reads the pipe once and closes it. No process opens another's
`/proc/PID/fd`: the dispatcher and the forkserver are non-dumpable, so a worker of an
ordinary user could not (only root could, which hid this from a suite run as root).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from contextlib import suppress

from kanban.tools.workbench import is_credential

HANDOFF_FD = "KANBAN_CREDENTIALS_FD"  # the descriptor number, in the worker's environment
PIPE_LIMIT = 60_000  # below a pipe's buffer: writing never blocks the dispatcher


def split(env: Mapping[str, str]) -> tuple[dict[str, str], int | None]:
    """The environment without credentials, and the read end of a pipe holding them; the
    environment as it is when it holds none (or too many to hand off)."""
    secret = {k: v for k, v in env.items() if is_credential(k)}
    payload = json.dumps(secret).encode()
    if not secret or len(payload) > PIPE_LIMIT:
        return dict(env), None
    read, write = os.pipe()
    try:
        os.write(write, payload)
    finally:
        os.close(write)
    return {k: v for k, v in env.items() if k not in secret}, read


def pass_on(channel: socket.socket, fd: int, data: bytes = b"\0") -> None:
    """Send `data` with a duplicate of `fd` attached (the caller keeps and closes `fd`)."""
    sent = socket.send_fds(channel, [data], [fd])
    if sent < len(data):
        channel.sendall(data[sent:])


def take(channel: socket.socket) -> int | None:
    """The descriptor the other end passed with its one-byte message; None at EOF."""
    _data, fds, _flags, _address = socket.recv_fds(channel, 1, 1)
    for extra in fds[1:]:
        os.close(extra)
    return fds[0] if fds else None


def receive(env: dict[str, str]) -> None:
    """In the worker: put the handed-off credentials into `env` (a no-op without any)."""
    number = env.pop(HANDOFF_FD, None)
    if not number or not number.isdigit():
        return
    fd = int(number)
    try:
        os.set_blocking(fd, False)
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    except OSError:
        return  # not a descriptor of ours: the worker fails on missing credentials, clearly
    finally:
        with suppress(OSError):
            os.close(fd)
    if chunks:
        env.update(json.loads(b"".join(chunks)))

