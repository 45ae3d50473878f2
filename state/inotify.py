"""Linux inotify on one folder or file, through libc (no dependency): sleep in select()
until a file is written, created, moved or removed, instead of polling it."""

from __future__ import annotations

import contextlib
import os
import select
from pathlib import Path

IN_MODIFY, IN_ATTRIB, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800


class Inotify:
    """Events of `mask` on the files of `folder` (not recursive), or on one file. OSError
    where the kernel or libc gives none (the caller then polls)."""

    def __init__(self, folder: Path, mask: int) -> None:
        import ctypes  # here: every command imports this module, few watch anything

        self._errno = ctypes.get_errno
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(self._errno(), "inotify_init1")
        try:
            self.watch(folder, mask)
        except OSError:
            os.close(self.fd)
            raise

    def watch(self, path: Path, mask: int) -> None:
        """Watch `path` too (a file replaced since it was watched: its new inode)."""
        if self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask) < 0:
            raise OSError(self._errno(), "inotify_add_watch")

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
