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
