"""Attacks on the sandbox a card's commands share: the exec server that forks each command
inside it, and what one command could leave for the next."""

from __future__ import annotations

import os
import sys

from tests.security.conftest import Attack
from tests.security.test_process_escape import kill_all, marked, marker

PROFILE = ('toolsets = ["kanban", "terminal", "file"]\napproval = "allow"\n'
           'sandbox = "required"\n')
PYTHON = os.path.realpath(sys.executable)  # readable in a card's sandbox (own_interpreter)

# Find the exec server (a Python in the sandbox that is not us), then try to take it
# over: ptrace it, read its memory, steal its socket to the worker with pidfd_getfd.
HIJACK = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) in (1, me):
        continue
    try:
        argv = open("/proc/%s/cmdline" % name, "rb").read().split(b"\0")
    except OSError:
        continue
    if b"-I" not in argv or b"-S" not in argv:
        continue
    pid = int(name)
    print("SERVER", pid)
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        print("HIJACKED ptrace")
        libc.ptrace(17, pid, 0, 0)
    try:
        open("/proc/%d/mem" % pid, "rb").close()
        print("HIJACKED mem")
    except OSError as exc:
        print("mem refused", exc.strerror)
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    for fd in range(3, 16):
        if pidfd >= 0 and libc.syscall(438, pidfd, fd, 0) >= 0:  # pidfd_getfd
            print("HIJACKED fd", fd)
"""


def test_a_daemon_of_one_command_never_sees_the_next(attack: Attack, sandboxed: None) -> None:
    attack.configure(PROFILE)
    mark = marker()
    try:
        card, seen = attack.run([
            ("terminal", {"command": f"setsid sleep {mark} > /dev/null 2>&1 & "
                          f"(sleep {mark} > /dev/null 2>&1 &); echo FIRST $$"}),
            ("terminal", {"command": "echo SECOND $$; ps -eo args"}),
        ])
        assert attack.card(card)[0] == "done", seen
        first = next(text for text in seen if "FIRST" in text)
        second = next(text for text in seen if "SECOND" in text)
        assert "exit code 0" in first and "exit code 0" in second
        assert mark not in second  # the daemons died before the second command began
        assert not marked(mark)
    finally:
        kill_all(marked(mark))


def test_a_command_cannot_take_over_the_exec_server(attack: Attack, sandboxed: None) -> None:
    attack.configure(PROFILE)
    card, seen = attack.run([
        ("write_file", {"path": "hijack.py", "content": HIJACK}),
        ("terminal", {"command": f"{PYTHON} hijack.py"}),
        ("terminal", {"command": "echo STILL-SERVED"}),
    ])
    assert attack.card(card)[0] == "done", seen
    hijack = next(text for text in seen if "SERVER" in text or "exit code" in text)
    assert "SERVER" in hijack, hijack  # it found the server, and got nothing from it
    assert "HIJACKED" not in hijack, hijack
    assert any("STILL-SERVED" in text and "exit code 0" in text for text in seen), seen
    attack.assert_contained()
