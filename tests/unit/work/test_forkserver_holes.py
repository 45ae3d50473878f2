"""worker.holes: the free slots of the forkserver's allocators taken up, so a forked
worker's own objects go to pages of its own. Each case runs in a fresh interpreter (the
allocator's statistics are read from C's stderr, which must be this process's alone)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

SCRIPT = """
import ctypes, gc, json, os, sys
from kanban.worker import holes

def private_dirty():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1])

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks "
                "fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]

# An import's leftovers, exaggerated: every other object of 200,000 freed.
kept = [(i, str(i)) for i in range(200_000)][::2]
bufs = [libc.malloc(300) for _ in range(4000)]
for b in bufs[::2]:
    libc.free(b)
gc.collect()
before = {"holes": sum(holes.small_object_holes().values()),
          "malloc_free_kib": libc.mallinfo2().fordblks // 1024}
if sys.argv[1] == "fill":
    holes.fill()
after = {"holes": sum(holes.small_object_holes().values()),
         "malloc_free_kib": libc.mallinfo2().fordblks // 1024}
gc.freeze()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    start = private_dirty()
    made = [(i, i + 1) for i in range(50_000)]  # a worker's new objects
    os.write(w, str(private_dirty() - start).encode())
    os._exit(0)
os.waitpid(pid, 0)
child_kib = int(os.read(r, 100))
print(json.dumps({"before": before, "after": after, "child_kib": child_kib}))
"""


def run(mode: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True,
                          text=True, timeout=120, check=True)
    return dict(json.loads(done.stdout))


def test_filling_takes_up_both_allocators_free_slots() -> None:
    got = run("fill")
    assert got["before"]["holes"] > 50_000  # the freed tuples and strings left these
    assert got["after"]["holes"] < got["before"]["holes"] / 10
    assert got["before"]["malloc_free_kib"] > 500
    assert got["after"]["malloc_free_kib"] < got["before"]["malloc_free_kib"] / 4


def test_a_forked_childs_new_objects_copy_fewer_pages_once_filled() -> None:
    """50,000 new tuples in the child: into the holes they copy the pages around each one;
    after the fill they go to fresh pages, packed."""
    filled, holey = run("fill"), run("leave")
    assert holey["after"]["holes"] > 0.99 * holey["before"]["holes"]  # the control: no fill
    assert filled["child_kib"] < 0.75 * holey["child_kib"], (filled, holey)


def test_where_the_statistics_cannot_be_read_nothing_is_filled() -> None:
    """A second thread could be writing to stderr while it is redirected: then no stats."""
    code = ("import threading, time\n"
            "from kanban.worker import holes\n"
            "t = threading.Thread(target=time.sleep, args=(2,)); t.start()\n"
            "print(holes.small_object_holes(), holes.fill_small_objects())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "{} 0"
