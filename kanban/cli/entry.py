"""The console script's first module: Ctrl-C while the command loads exits at once.

Loading `kanban.cli.app` and click takes a noticeable moment on a busy machine. A Ctrl-C in
it would print a traceback of half-imported modules; until they are loaded it exits 130 at
once instead (nothing has begun that needs cleaning up). Then a Ctrl-C raises
KeyboardInterrupt as Python's own handler does, except where Python would drop it (inside
importlib's module-lock callback), and `kanban.cli.app.main` turns it into exit 130 after
the command's cleanup.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

from kanban.signals import redeliver_outside_import_lock


def _exit_now(signum: int, frame: FrameType | None) -> None:
    os._exit(128 + signum)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if not redeliver_outside_import_lock(signum, frame):
        raise KeyboardInterrupt


def main() -> None:
    """`kanban`: the command line, loaded with Ctrl-C meaning "never mind"."""
    try:  # only where Ctrl-C would raise (not ignored by a shell, not another thread)
        held = signal.getsignal(signal.SIGINT) is signal.default_int_handler
        if held:
            signal.signal(signal.SIGINT, _exit_now)
    except ValueError:
        held = False
    from kanban.cli.app import main as run  # the load this module exists to guard

    if held:
        signal.signal(signal.SIGINT, _interrupt)
    run()


if __name__ == "__main__":
    main()
