"""Linux inotify on one folder, through libc (no dependency): sleep in select() until a file
in the folder is written, created, moved or removed, instead of polling it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
from pathlib import Path

IN_MODIFY, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x40, 0x80
IN_CREATE, IN_DELETE = 0x100, 0x200


class Inotify:
    """Events of `mask` on the files of `folder` (not recursive). OSError where the kernel
    or libc gives none (the caller then polls)."""

    def __init__(self, folder: Path, mask: int) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if libc.inotify_add_watch(self.fd, os.fsencode(folder), mask) < 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), "inotify_add_watch")

    def wait(self, timeout: float, *also: int) -> bool:
        """Until an event (True, events drained), a readable fd of `also`, or `timeout`."""
        ready, _, _ = select.select([self.fd, *also], [], [], timeout)
        if self.fd in ready:
            self.drain()
            return True
        return False

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 65536):
                pass

    def close(self) -> None:
        os.close(self.fd)
