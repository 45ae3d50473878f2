"""Signals to worker process groups, and confirming a group is gone."""

from __future__ import annotations

import os
import signal
import time


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    while time.monotonic() < deadline:
        if not group_alive(pgid) and not _pid_alive(pgid):
            return True
        time.sleep(delay)  # waiting for the kernel/parent to reap, not for a state we own
        delay = min(delay * 2, 0.05)
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
