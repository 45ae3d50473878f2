"""Signals to worker process groups, and confirming a group is gone."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

_PROC = Path("/proc")


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process of the group exists.

    Zombies count as dead: an orphaned worker's zombie may wait long for a reaper.
    """
    if _PROC.is_dir():
        return any(True for _ in _live_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _live_members(pgid: int) -> Iterator[int]:
    with os.scandir(_PROC) as entries:  # closed even when the caller stops early
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            state, pgrp = fields[0], int(fields[2])
            if (pgrp == pgid or int(entry.name) == pgid) and state not in ("Z", "X"):
                yield int(entry.name)


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group (falling back to the process); False if already gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        try:  # not yet a group leader (just forked): signal the process itself
            os.kill(pgid, sig)
            return True
        except ProcessLookupError:
            return False


def kill_and_confirm(pgid: int, *, timeout: float = 5.0) -> bool:
    """SIGKILL the group and wait until no member is left; True once confirmed dead."""
    signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    delay = 0.001
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)  # the kernel tears the processes down; nothing to wait on
        delay = min(delay * 2, 0.05)
    return True
