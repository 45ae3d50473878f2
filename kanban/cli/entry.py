"""The console script's first module: Ctrl-C while the command loads exits at once.

Loading `kanban.cli.app` and click takes a noticeable moment on a busy machine. A Ctrl-C in
it would print a traceback of half-imported modules; until they are loaded it exits 130 at
once instead (nothing has begun that needs cleaning up). That holds from this module's
import: it imports only `os` and `signal` first (loaded already by Python's own start-up,
save `signal`), and takes the signal at its top level, where an interrupt that lands while
it does so is caught there (one that lands inside `signal.signal`'s Python code raised
through it, printing kanban's frames). Then a Ctrl-C raises
KeyboardInterrupt as Python's own handler does, except while a module is being imported
(where Python would drop it or wrap it in a RuntimeError: it is raised once the import is
done), and `kanban.cli.app.main` turns it into exit 130 after
the command's cleanup; once the command has decided its exit code, Ctrl-C exits at once
again, so none can land outside the command's handling and print a traceback.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

INTERRUPTED = 128 + signal.SIGINT


def _exit_now(signum: int, frame: FrameType | None) -> None:
    os._exit(128 + signum)


def _hold() -> bool:
    """Ctrl-C exits at once from now on, where it would raise (not ignored by a shell, not
    another thread); True if so."""
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _exit_now)
            return True
    except ValueError:
        pass
    return False


try:  # at the top level: a Ctrl-C before it shows only the script's and modules' top levels
    _HELD = _hold()
except KeyboardInterrupt:
    os._exit(INTERRUPTED)


def main() -> None:
    """`kanban`: the command line, loaded with Ctrl-C meaning "never mind"."""
    held = _HELD
    # Loaded after the hold (kanban.signals loads threading): the loads it exists to guard.
    from kanban.cli.app import main as run
    from kanban.signals import redeliver_outside_imports, take_deferred

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if not redeliver_outside_imports(signum, frame):
            raise KeyboardInterrupt

    if held:
        signal.signal(signal.SIGINT, interrupt)
    try:
        run()
    except KeyboardInterrupt:  # landed just before the command's own handling began
        raise SystemExit(INTERRUPTED) from None
    finally:
        if held:  # the command has said its last: no Ctrl-C may raise in the way out
            signal.signal(signal.SIGINT, _exit_now)
            if take_deferred() is not None:  # came in an import the command then finished
                raise SystemExit(INTERRUPTED)  # replaces the command's own exit


if __name__ == "__main__":
    main()
