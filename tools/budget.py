"""A card's workspace has a size budget (the profile's `max_workspace_bytes`).

Measured as the disk it takes (allocated blocks, a hard-linked file once, not crossing into
other file systems), before and while a command runs and before each file write. A command
may write at most what is left (RLIMIT_FSIZE) and is stopped when the workspace passes the
budget; a write that would pass it is refused. Either way the card blocks with a reason a
person can act on: free space or raise the budget, then unblock.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from kanban import transitions
from kanban.agent.types import ToolResult
from kanban.tools.kanban_tools import finishing
from kanban.tools.workbench import Workbench

BLOCK = 512  # st_blocks counts these
# A command may write a file this much past what is left, so that reaching its file-size
# limit always leaves the workspace past the budget (block rounding cannot hide it).
OVERSHOOT = 64 * 1024
REUSE_FACTOR = 20.0  # a measure that took t seconds serves a quick check for 20 t seconds
REUSE_MAX_S = 60.0
_measured: dict[str, tuple[float, int, float]] = {}  # workspace -> (when, bytes, cost)


def disk_usage(root: Path, stop_above: int | None = None) -> int:
    """Bytes on disk under `root` (itself included); the walk stops early once the total
    passes `stop_above`."""
    try:
        top = os.lstat(root)
    except OSError:
        return 0
    total = top.st_blocks * BLOCK
    seen: set[tuple[int, int]] = set()
    pending = [str(root)]
    while pending:
        for entry in _entries(pending.pop()):
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != top.st_dev:
                continue  # a mount inside the workspace is not the workspace's disk
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * BLOCK
            if stop_above is not None and total > stop_above:
                return total
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
    return total


def _entries(folder: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def limit(bench: Workbench) -> int:
    return bench.profile.max_workspace_bytes


def places(bench: Workbench) -> list[Path]:
    """What the budget covers: the workspace, and the card's own HOME when it has one."""
    home, workspace = bench.own_home, bench.workspace
    if home is None or home == workspace or workspace in home.parents:
        return [workspace]
    return [workspace, home]


def used(bench: Workbench, *, recent: bool = False) -> int:
    """The disk usage of the workspace and the card's HOME (up to just past the budget).
    `recent`: a measure taken lately will do (a big workspace takes a second to walk: at
    most every 20 such)."""
    key, now = str(bench.workspace), time.monotonic()
    if recent and key in _measured:
        at, size, cost = _measured[key]
        if now - at < min(REUSE_MAX_S, REUSE_FACTOR * cost):
            return size
    size = 0
    for place in places(bench):
        size += disk_usage(place, stop_above=limit(bench) - size)
    _measured[key] = (now, size, time.monotonic() - now)
    return size


def over(bench: Workbench) -> str | None:
    """Why the workspace is past its budget, or None while it is within it."""
    now = used(bench)
    if now <= limit(bench):
        return None
    what = "workspace and its HOME take" if len(places(bench)) > 1 else "workspace takes"
    return (f"the card's {what} more than its budget of {limit(bench):,} bytes "
            f"(max_workspace_bytes of profile {bench.profile.name!r}; "
            f"{now:,} bytes or more measured)")


def command_room(bench: Workbench) -> int:
    """The most a command may write to one file: what is left of the budget (and a little
    more, see OVERSHOOT); 0 when nothing is left."""
    left = limit(bench) - used(bench, recent=True)
    return left + OVERSHOOT if left > 0 else 0


def write_refusal(bench: Workbench, existing: os.stat_result | None,
                  size: int) -> ToolResult | None:
    """None when writing `size` bytes over the file `existing` describes (None: a new file)
    keeps the workspace within its budget; else the card is blocked and this is the tool's
    result."""
    replaced = existing.st_blocks * BLOCK if existing is not None else 0
    after = used(bench, recent=True) - replaced + size
    if after <= limit(bench):
        return None
    return exceeded(bench, f"writing {size:,} bytes would take the card's workspace past its "
                           f"budget of {limit(bench):,} bytes (max_workspace_bytes of profile "
                           f"{bench.profile.name!r}; {after:,} bytes after the write)",
                    "not written")


def exceeded(bench: Workbench, reason: str, what: str) -> ToolResult:
    """Block the card with `reason` (outside a worker: only an error result)."""
    scope = bench.scope
    text = f"{what}: {reason}."
    if scope is None:
        return ToolResult(text, is_error=True)
    why = (f"{reason}. Free space in the workspace or raise max_workspace_bytes, then "
           "unblock the card.")
    with finishing(scope):
        scope.write(lambda conn: transitions.block(conn, scope.card_id, why,
                                                   now=scope.kb.clock(), actor=scope.actor))
    scope.finished = "blocked"
    return ToolResult(f"{text} Your card is blocked until a person frees space or raises "
                      "the budget.", is_error=True, ends_run=True)
