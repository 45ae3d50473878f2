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


# Kill the exec server: the card's next commands each start a bwrap of their own.
KILL_SERVER = r"""
import os, signal
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) not in (1, os.getpid()):
        try:
            argv = open("/proc/%s/cmdline" % name, "rb").read().split(b"\0")
        except OSError:
            continue
        if b"-I" in argv and b"-S" in argv:
            os.kill(int(name), signal.SIGKILL)
"""


def test_a_command_in_a_bwrap_of_its_own_is_counted_in_its_own_sandbox(
        attack: Attack, sandboxed: None) -> None:
    """With the shared sandbox gone (its exec server killed by a command), each command
    starts a bwrap of its own under the runner's wrappers (setpriv, prlimit, timeout). Its
    counts (files in /tmp, processes, memory) must be read in that sandbox: read through
    the outer bwrap they were the host's (518,137 files in the host's /tmp blocked a card
    past the default limit of 500,000). The limits here are far below any host's counts.
    Where the shared sandbox did not start at all, every command has a bwrap of its own."""
    attack.configure(PROFILE + "max_workspace_files = 1000\nmax_processes = 64\n"
                     f"max_memory_bytes = {64 << 20}\n")
    card, results = attack.run([
        ("terminal", {"command": f"{PYTHON} -c '{KILL_SERVER}'"}),
        ("terminal", {"command": "touch /tmp/a /tmp/b; sleep 1; echo COUNTED-IN-ITS-OWN"}),
        ("terminal", {"command": "for i in $(seq 1 3000); do : > /tmp/f$i; done; sleep 5",
                      "timeout_s": 60})])
    assert len(results) == 2, (attack.card(card), results)  # the flood's blocked the card
    killed, said = results
    log = "\n".join(f.read_text() for f in (attack.board.home / "logs").glob(f"{card}-*.log"))
    if "the card's sandbox did not start" not in log:  # (a loaded host may refuse it)
        assert "sandbox stopped while it ran" in killed, killed  # it ran through that server
    assert "each command now starts its own bwrap" in log, log
    assert "COUNTED-IN-ITS-OWN" in said, said
    status, error = attack.card(card)
    assert status == "blocked" and "/tmp and /dev/shm" in (error or ""), error
    assert "more than 1,000 files" in (error or ""), error
