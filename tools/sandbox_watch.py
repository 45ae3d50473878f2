"""What a running sandbox holds that no limit bwrap or the kernel offers bounds, counted from
outside while a command runs, through the sandbox's own root (/proc/PID/root of bwrap's
init, in the sandbox's mount and PID namespaces):

- Files in its private /tmp and /dev/shm. They are tmpfs: every file and folder takes
  kernel memory whatever its size. The byte size of each is bounded when it is mounted
  (bwrap's --size), but nothing bounds their count: a flood of empty files would take
  gigabytes of the host's memory, and the workspace's budget never sees them.
- Its processes. RLIMIT_NPROC (the runner's backstop) does not hold for root, capabilities
  dropped or not: a fork bomb in a root's sandbox would take every pid of the host. Past the
  bound the command is stopped, and with it the sandbox's every process (the session sweeps
  them; a sandbox of its own dies with its init).
- Its memory. No rlimit bounds a group of processes, and address-space limits break runtimes
  that reserve large ranges (Go, the JVM, V8). The resident memory of the sandbox's
  processes that is no file's (anonymous, and shared memory they made) is summed at each
  check; past the bound the command is stopped
  as for too many processes. A burst between two checks is the OOM killer's: a sandboxed
  command is its first pick (oom_score_adj 1000, kanban.tools.sandbox).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from kanban.tools.procctl import children
from kanban.tools.runner import MAX_PROCESSES, CommandSpec
from kanban.tools.runner import TOO_MANY_PROCESSES as PLAIN_TOO_MANY

PRIVATE = ("tmp", "dev/shm")
TOO_MANY_PROCESSES = "the sandbox runs more than"
TOO_MUCH_MEMORY = "the sandbox's processes hold more than"
FORK_ADVICE = ("See what the card's command started (its log), then unblock the card if it "
               "may go on.")
MEMORY_ADVICE = ("See what the card's command ran (its log); raise the profile's "
                 "max_memory_bytes if it needs more, then unblock the card.")


def advice(stopped: str | None) -> str | None:
    """What a person may do about a command this watch stopped (None: not stopped here)."""
    if stopped is None:
        return None
    if stopped.startswith((TOO_MANY_PROCESSES, PLAIN_TOO_MANY)):
        return FORK_ADVICE
    if stopped.startswith(TOO_MUCH_MEMORY):
        return MEMORY_ADVICE
    return None


def _init(top: int, depth: int = 8) -> int | None:
    """PID 1 of the sandbox: the first process below `top` (bwrap, or the runner's wrappers
    around it: timeout forks) in a PID namespace other than ours, once its root is no
    longer ours (bwrap's child starts in the host's root and pivots); None before then,
    or when it is gone. Never a process of the host's: its /tmp and /proc are the host's."""
    try:
        ours = os.stat("/proc/self/ns/pid").st_ino
        root = os.stat("/")
    except OSError:
        return None
    level = [top]
    for _ in range(depth):
        below = []
        for parent in level:
            for pid in sorted(children(parent)):
                try:
                    if os.stat(f"/proc/{pid}/ns/pid").st_ino == ours:
                        below.append(pid)
                        continue
                    theirs = os.stat(f"/proc/{pid}/root")
                except OSError:
                    continue
                if (theirs.st_dev, theirs.st_ino) == (root.st_dev, root.st_ino):
                    return None  # not set up yet
                return pid
        if not below:
            return None
        level = below
    return None


def private_files(inside: int) -> int | None:
    """Files and folders in the private /tmp and /dev/shm of the sandbox whose init is
    `inside` (the folders themselves not counted); None when it is gone."""
    total = 0
    try:
        for place in PRIVATE:
            fs = os.statvfs(f"/proc/{inside}/root/{place}")
            total += fs.f_files - fs.f_ffree - 1
    except OSError:
        return None
    return total


def processes(inside: int) -> int | None:
    """The processes of the sandbox whose init is `inside` (its /proc lists its PID
    namespace); None when it is gone."""
    try:
        return sum(1 for name in os.listdir(f"/proc/{inside}/root/proc") if name.isdigit())
    except OSError:
        return None


def memory(inside: int) -> int | None:
    """Bytes of resident memory that is no file's (heap, stacks, anonymous maps, and shared
    memory of a process's own making: a memfd or a shared map, which the kernel counts as
    shared and /dev/shm's size bound does not hold) of the processes of the sandbox whose
    init is `inside`; None when it is gone. A process that exits while it is read counts
    for nothing; memory two of them share is counted for each."""
    root = f"/proc/{inside}/root/proc"
    try:
        names = [name for name in os.listdir(root) if name.isdigit()]
    except OSError:
        return None
    kib = 0
    for name in names:
        try:
            with open(f"{root}/{name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith((b"RssAnon:", b"RssShmem:")):
                kib += int(line.split()[1])
    return kib << 10


def watched(spec: CommandSpec, files: int | None, bwrap_pid: Callable[[], int | None], *,
            most_processes: int = MAX_PROCESSES, most_memory: int | None = None
            ) -> CommandSpec:
    """`spec` whose check also stops the command once the sandbox's memory folders hold
    more than `files` entries (None: not counted), it runs more than `most_processes`
    processes or they hold more than `most_memory` bytes (None: not counted). Only a
    watched command (one with a check) is watched here."""
    check = spec.check
    if check is None:
        return spec

    def all_of_them() -> str | None:
        pid = bwrap_pid()
        inside = _init(pid) if pid is not None else None  # one look for both counts
        if inside is None:
            return check()
        running = processes(inside)
        if running is not None and running > most_processes:
            return (f"{TOO_MANY_PROCESSES} {most_processes:,} processes "
                    f"({running:,} counted: a fork bomb?)")
        used = memory(inside) if most_memory is not None else None
        if most_memory is not None and used is not None and used > most_memory:
            return (f"{TOO_MUCH_MEMORY} {_mib(most_memory)} of memory (max_memory_bytes; "
                    f"{_mib(used)} counted)")
        held = private_files(inside) if files is not None else None
        if files is not None and held is not None and held > files:
            return (f"the sandbox's /tmp and /dev/shm (memory) hold more than {files:,} "
                    f"files and folders (max_workspace_files; {held:,} counted)")
        return check()

    return replace(spec, check=all_of_them)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"
