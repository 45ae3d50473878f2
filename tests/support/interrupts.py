"""Reading what a command said when a Ctrl-C reached it before kanban could take it.

Two moments precede `kanban.cli.entry.main()`'s first line, where kanban's own handling
begins: Python's start-up and the console script's import of the entry module. A signal
there is Python's to report, in one of these shapes."""

from __future__ import annotations

import re

# "During handling of the above exception, another exception occurred:" and its kin.
_CHAINED = re.compile(r"\n(?:During handling of the above exception, another exception "
                      r"occurred|The above exception was the direct cause of the following "
                      r"exception):\n")
DROPPED = "Exception ignored in: <function _get_module_lock.<locals>.cb"
FATAL_AT_START = "Fatal Python error: init_"  # init_import_site, init_sys_streams, ...
# Python asks the path hooks whether the script's folder is an import path entry (for
# sys.path[0]); interrupted there, it prints this and the frames, then runs the script.
ARGV0_CHECK = "Failed checking if argv[0] is an import path entry"
# Python gives the script's __main__ a loader before running its first line; interrupted
# there, it prints this and the frames, and exits 1 without running the script (seen once
# in `make test`, 2026-11-29).
MAIN_LOADER = "failed to set __main__.__loader__"
# site runs each .pth file's import lines; an interrupt there that surfaces as an Exception
# (wrapped: __set_name__ makes it a RuntimeError) is printed and the rest of the file skipped.
SITE_PTH = ("Error processing line ", "Remainder of file ignored")


def last_traceback(err: str) -> str:
    """The traceback Python printed last: a KeyboardInterrupt raised while the import
    machinery handled a KeyError of its own (a path-hook cache miss) comes chained to it."""
    return _CHAINED.split(err)[-1].lstrip()


def dropped_by_python(err: str) -> bool:
    """The KeyboardInterrupt came while a module lock's weakref callback ran, during the
    import of kanban's entry module: Python drops an exception raised there ("Exception
    ignored in") and the command goes on. Once main() runs, kanban re-delivers such a
    signal outside the callback (kanban.signals), so only importlib frames may show."""
    if not err.startswith(DROPPED) or "KeyboardInterrupt" not in err:
        return False
    block = err.split("KeyboardInterrupt", 1)[0].splitlines()[1:]
    frames = [line.strip() for line in block if line.strip().startswith("File ")]
    return bool(frames) and all(f.startswith('File "<frozen importlib.') for f in frames)


def in_pythons_startup(err: str) -> bool:
    """The signal came during Python's own start-up, before any module of kanban's was
    looked for: a fatal init error, the argv[0] import-path check or the setting of the
    script's loader, whose interrupted frames are all the import machinery's, or a
    KeyboardInterrupt with no frame at all
    (raised by Python's C code outside any Python frame, as in setting up the script's
    run: a frame of the script or of kanban's would be printed; seen once in a loaded
    CI run, exit 1)."""
    if FATAL_AT_START in err or err.strip() == "KeyboardInterrupt":
        return True
    if err.startswith(SITE_PTH[0]) and SITE_PTH[1] in err and "KeyboardInterrupt" in err:
        return True  # site's .pth processing: before the script's first line
    if not err.startswith((ARGV0_CHECK, f"python: {MAIN_LOADER}")) or \
            "KeyboardInterrupt" not in err:
        return False
    block = err.split("KeyboardInterrupt", 1)[0].splitlines()[1:]
    frames = [line.strip() for line in block if line.strip().startswith("File ")]
    # the path hooks asked (zipimport's first, then importlib's file finder): frozen
    # modules of Python's own, whichever of them the signal found
    return bool(frames) and all(f.startswith('File "<frozen ') for f in frames)
