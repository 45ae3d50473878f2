"""What tests/support/interrupts.py takes for a Ctrl-C in Python's own start-up, and what
it does not: a frame of the script or of kanban's is never Python's."""

from __future__ import annotations

from tests.support.interrupts import in_pythons_startup

# As a loaded `make test` printed it (2026-11-29): the signal came while Python set the
# script's loader, before its first line.
MAIN_LOADER = """python: failed to set __main__.__loader__
Traceback (most recent call last):
  File "<frozen importlib._bootstrap_external>", line 1097, in __init__
KeyboardInterrupt:
"""


def test_an_interrupt_while_python_sets_the_scripts_loader_is_pythons() -> None:
    assert in_pythons_startup(MAIN_LOADER)


def test_a_frame_of_the_script_or_of_kanban_is_not_pythons() -> None:
    for frame in ('  File "/venv/bin/kanban", line 5, in <module>\n',
                  '  File "/src/kanban/cli/entry.py", line 9, in main\n'):
        printed = MAIN_LOADER.replace("Traceback (most recent call last):\n",
                                      "Traceback (most recent call last):\n" + frame)
        assert not in_pythons_startup(printed)
    assert not in_pythons_startup(MAIN_LOADER.replace("KeyboardInterrupt", "ValueError"))
