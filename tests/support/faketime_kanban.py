"""`kanban` for a process under libfaketime with FAKETIME_DONT_FAKE_MONOTONIC=1 (a host
whose wall clock is off; monotonic clocks are never skewed).

libfaketime 0.9.10 breaks Python's time.sleep there (clock_nanosleep with an absolute
monotonic deadline fails with EINVAL), while timed waits on locks work; and faking the
monotonic clock instead stretches every timed wait by the offset. So this harness routes
time.sleep through a lock's timed wait before anything imports it. Test harness only.
"""

import sys
import threading
import time

_pause = threading.Event()


def _sleep(seconds: float) -> None:
    if seconds > 0:
        _pause.wait(seconds)


time.sleep = _sleep

from kanban.cli.app import main  # noqa: E402 - after the patch, on purpose

sys.exit(main())
