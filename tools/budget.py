"""A card's workspace has a size budget (the profile's `max_workspace_bytes`) and a limit
on its files and folders (`max_workspace_files`: empty files take no disk but each takes an
inode, and millions of them exhaust the file system's for everyone).

Measured as the disk it takes (allocated blocks, a hard-linked file once, not crossing into
other file systems) and the entries it holds, before and while a command runs and before
each file write. A command may write at most what is left (RLIMIT_FSIZE) and is stopped
when the workspace passes either bound; a write that would pass one is refused. Either way
the card blocks with a reason a person can act on: free space or raise the limit, then
unblock. (The sandbox's /tmp and /dev/shm, which are memory, see kanban.tools.sandbox_watch.)
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
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
_measured: dict[str, tuple[float, Usage, float]] = {}  # workspace -> (when, usage, cost)


@dataclass(frozen=True)
class Usage:
    """What a workspace takes: disk bytes, and files and folders (inodes)."""

    bytes: int = 0
    files: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.bytes + other.bytes, self.files + other.files)


def disk_usage(root: Path, stop_above: int | None = None) -> int:
    """Bytes on disk under `root` (itself included); the walk stops early once the total
    passes `stop_above`."""
    return measure(root, Usage(stop_above if stop_above is not None else -1, -1)).bytes


def measure(root: Path, stop_above: Usage = Usage(-1, -1)) -> Usage:
    """Bytes on disk and entries under `root` (itself included, each hard-linked file once).
    The walk stops early once either passes its bound in `stop_above` (negative: none), so
    a flood of millions of empty files is never walked to its end."""
    try:
        top = os.lstat(root)
    except OSError:
        return Usage()
    total, files = top.st_blocks * BLOCK, 1
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
            files += 1
            if 0 <= stop_above.bytes < total or 0 <= stop_above.files < files:
                return Usage(total, files)
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
    return Usage(total, files)


def _entries(folder: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def limit(bench: Workbench) -> int:
    return bench.profile.max_workspace_bytes


def file_limit(bench: Workbench) -> int:
    return bench.profile.max_workspace_files


def places(bench: Workbench) -> list[Path]:
    """What the budget covers: the workspace, and the card's own HOME when it has one."""
    home, workspace = bench.own_home, bench.workspace
    if home is None or home == workspace or workspace in home.parents:
        return [workspace]
    return [workspace, home]


def used(bench: Workbench, *, recent: bool = False) -> Usage:
    """What the workspace and the card's HOME take (up to just past either budget).
    `recent`: a measure taken lately will do (a big workspace takes a second to walk: at
    most every 20 such)."""
    key, now = str(bench.workspace), time.monotonic()
    if recent and key in _measured:
        at, usage, cost = _measured[key]
        if now - at < min(REUSE_MAX_S, REUSE_FACTOR * cost):
            return usage
    usage = Usage()
    for place in places(bench):
        usage += measure(place, Usage(max(0, limit(bench) - usage.bytes),  # past: at once
                                      max(0, file_limit(bench) - usage.files)))
    _measured[key] = (now, usage, time.monotonic() - now)
    return usage


def over(bench: Workbench) -> str | None:
    """Why the workspace is past its budget, or None while it is within it."""
    now = used(bench)
    both = len(places(bench)) > 1
    if now.files > file_limit(bench):
        return (f"the card's {'workspace and its HOME hold' if both else 'workspace holds'} "
                f"more than its limit of {file_limit(bench):,} files and folders "
                f"(max_workspace_files of profile {bench.profile.name!r}; "
                f"{now.files:,} or more counted)")
    if now.bytes <= limit(bench):
        return None
    what = "workspace and its HOME take" if both else "workspace takes"
    return (f"the card's {what} more than its budget of {limit(bench):,} bytes "
            f"(max_workspace_bytes of profile {bench.profile.name!r}; "
            f"{now.bytes:,} bytes or more measured)")


def command_room(bench: Workbench) -> int:
    """The most a command may write to one file: what is left of the budget (and a little
    more, see OVERSHOOT); 0 when nothing is left, of bytes or of files."""
    now = used(bench, recent=True)
    left = limit(bench) - now.bytes
    return left + OVERSHOOT if left > 0 and now.files < file_limit(bench) else 0


def write_refusal(bench: Workbench, existing: os.stat_result | None,
                  size: int) -> ToolResult | None:
    """None when writing `size` bytes over the file `existing` describes (None: a new file)
    keeps the workspace within its budget; else the card is blocked and this is the tool's
    result."""
    now = used(bench, recent=True)
    if existing is None and now.files >= file_limit(bench):
        return exceeded(bench, f"a new file would take the card's workspace past its limit of "
                               f"{file_limit(bench):,} files and folders (max_workspace_files "
                               f"of profile {bench.profile.name!r})", "not written")
    replaced = existing.st_blocks * BLOCK if existing is not None else 0
    after = now.bytes - replaced + size
    if after <= limit(bench):
        return None
    return exceeded(bench, f"writing {size:,} bytes would take the card's workspace past its "
                           f"budget of {limit(bench):,} bytes (max_workspace_bytes of profile "
                           f"{bench.profile.name!r}; {after:,} bytes after the write)",
                    "not written")


SPACE_ADVICE = "Free space in the workspace or raise the limit named, then unblock the card."


def exceeded(bench: Workbench, reason: str, what: str, *,
             advice: str = SPACE_ADVICE) -> ToolResult:
    """Block the card with `reason` and what a person may do (outside a worker: only an
    error result)."""
    scope = bench.scope
    text = f"{what}: {reason}."
    if scope is None:
        return ToolResult(text, is_error=True)
    why = f"{reason}. {advice}"
    with finishing(scope):
        scope.write(lambda conn: transitions.block(conn, scope.card_id, why,
                                                   now=scope.kb.clock(), actor=scope.actor))
    scope.finished = "blocked"
    return ToolResult(f"{text} Your card is blocked until a person looks at it.",
                      is_error=True, ends_run=True)
