"""The free space in a forkserver's memory, taken up before it forks workers.

A forked worker shares the forkserver's pages until it writes to one. Where the worker's
own new objects go matters: CPython's small-object allocator and glibc's malloc first
reuse the free slots that the forkserver's imports left all over its pages, and each slot
a worker takes copies a 4 KiB page that held nothing of the worker's. With those slots
filled here (the fillers are kept and never touched again), a worker's allocations land
on fresh pages of its own, packed together.

Measured with 40 streaming workers (row 14.3's load): 0.27 MiB less private memory per
worker for the small objects, 0.18 MiB for malloc, for about 1.5 MiB more in the one
forkserver. Both are best effort: an allocator that cannot be read this way is left as
it is.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable
from contextlib import suppress

# What CPython's stats call a size class, and how to make an object of exactly that size.
# bytes(n) takes 33 + n bytes; float and object are the only common objects of 24 and 16.
_MAKERS: dict[int, Callable[[int], object]] = {16: lambda size: object(),
                                               32: lambda size: float(size) + 0.5}
MALLOC_SIZES = (16384, 4096, 1024, 256, 64, 24)  # largest first: big free chunks go first
MAX_MALLOCS = 200_000  # a bound on the malloc loop, whatever the heap looks like
MAX_BYTES = 64 << 20  # ... and on what it may take

_kept: list[object] = []  # the fillers: alive as long as the forkserver


def fill() -> None:
    """Take up the free slots of both allocators (never fails: it only saves memory).
    The small objects first: the list keeping them frees its old buffers as it grows, for
    malloc's filling to take (which itself makes one short-lived int at a time)."""
    with suppress(Exception):
        fill_small_objects()
    with suppress(Exception):
        fill_malloc()


def small_object_holes() -> dict[int, int]:
    """Free blocks in the small-object allocator's pools that hold other blocks, by size
    class (bytes); empty where its statistics cannot be read."""
    text = _malloc_stats()
    holes: dict[int, int] = {}
    for line in text.splitlines():
        fields = line.split()
        # "class size num-pools blocks-in-use avail-blocks"; the table ends at a blank line
        if len(fields) == 5 and all(f.isdigit() for f in fields):
            holes[int(fields[1])] = int(fields[4])
        elif holes and not fields:
            break
    return holes


def fill_small_objects() -> int:
    """Fill every free block of a pool in use with an object of its size; how many."""
    made = 0
    for size, free in small_object_holes().items():
        make = _MAKERS.get(size, _bytes_of)
        _kept.extend(make(size) for _ in range(free))
        made += free
    return made


def _bytes_of(size: int) -> object:
    return bytes(size - 33)


def _malloc_stats() -> str:
    """What sys._debugmallocstats writes to the C-level stderr; "" where it cannot be read
    safely (another thread could be writing to stderr meanwhile)."""
    debug = getattr(sys, "_debugmallocstats", None)
    if debug is None or threading.active_count() != 1 or not hasattr(os, "memfd_create"):
        return ""
    sink = os.memfd_create("kanban-mallocstats")
    saved = os.dup(2)
    try:
        sys.stderr.flush()
        os.dup2(sink, 2)
        try:
            debug()
        finally:
            os.dup2(saved, 2)
        size = os.lseek(sink, 0, os.SEEK_END)
        return os.pread(sink, size, 0).decode(errors="replace")
    finally:
        os.close(saved)
        os.close(sink)


def fill_malloc() -> int:
    """Allocate (and keep) chunks until glibc's malloc has to grow its heap for the next
    one: the free chunks and the top's spare room are then ours. How many; 0 but with
    glibc (its mallinfo2 says it is)."""
    libc = ctypes.CDLL(None)
    if getattr(libc, "mallinfo2", None) is None:
        return 0
    malloc, free, sbrk = libc.malloc, libc.free, libc.sbrk
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    sbrk.restype, sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
    # Only a malloc that serves small chunks from below the break is glibc's own: one
    # preloaded in its place (jemalloc, say) never moves the break, and would be fed
    # chunks to the end of the budget.
    probe = malloc(MALLOC_SIZES[-1])
    if probe is None:
        return 0
    free(probe)
    if probe >= (sbrk(0) or 0):
        return 0
    budget = MAX_BYTES
    made = 0
    for size in MALLOC_SIZES:
        while made < MAX_MALLOCS and budget >= size:
            end = sbrk(0)  # the heap's end, as it is now
            chunk = malloc(size)
            if chunk is None:
                return made
            if sbrk(0) != end:  # the heap grew for it: what was free is taken
                free(chunk)
                break
            made += 1  # never freed: held for the forkserver's life, not even named
            # (a list of them would itself be freed in steps as it grew, and refilled)
            budget -= size
    return made
