"""This host and its processes, as /proc tells: the boot, and a process's start time (a pid
alone is reused)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_STAT = Path("/proc/stat")


def hostname() -> str:
    """This host's name, as socket.gethostname() says it (the kernel's node name), for the
    commands that need no socket otherwise: importing one costs every command a millisecond."""
    return os.uname().nodename


def boot_id() -> str | None:
    """This boot of the host (Linux); None where the kernel does not say."""
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def booted_at() -> datetime | None:
    try:
        for line in _STAT.read_text().splitlines():
            if line.startswith("btime "):
                return datetime.fromtimestamp(int(line.split()[1]), UTC)
    except (OSError, ValueError):
        return None
    return None


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks after boot; None if it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])  # field 22 of stat; fields[0] is field 3


def is_same_process(pid: int | None, start: int | None) -> bool:
    """True only if `pid` is alive and still the process that started at `start`."""
    return pid is not None and start is not None and process_start(pid) == start
