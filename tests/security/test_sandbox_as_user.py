"""A sandbox's own network when kanban runs as a user other than root (as most people run
it): the host's loopback services stay out of reach there too.

bwrap, run by a user, makes a user namespace for the sandbox that maps the user to root,
and runs the command in one nested in it that maps root back to the user, with no
capability. slirp4netns and ip enter the outer one, which owns the network, as its root to
configure the network; the command sees its own uid and cannot change a route.

The test builds a sandbox's command line as the worker does, then runs it as `nobody`
(setpriv), with Debian's own Python for the launcher (this suite's interpreter may live
under /root, out of nobody's reach).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.tools.sandbox import SandboxPolicy
from tests.support.sandbox import Listener, require, require_own_network, require_root_with

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
SECRET = b"loopback-service-of-the-host"
KNOCK = r"""
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=3) as s:
            print("CONNECTED", target, s.recv(100))
    except OSError as exc:
        print("refused", target)
"""

# The user namespace that owns the network (whose root configured it), and the parent of the
# command's own: the command asks the kernel for each and tries to enter it.
ENTER = r"""
import ctypes, fcntl, os
libc = ctypes.CDLL(None, use_errno=True)
said = []
for what, path, request in (("network's", "/proc/self/ns/net", 0xB701),  # NS_GET_USERNS
                            ("parent", "/proc/self/ns/user", 0xB702)):  # NS_GET_PARENT
    try:
        ns = fcntl.ioctl(os.open(path, os.O_RDONLY), request)
    except OSError as exc:
        said.append(what + " " + exc.strerror)
        continue
    said.append(what + (" entered" if libc.setns(ns, 0x10000000) == 0 else " refused"))
print("; ".join(said))
"""


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A folder of nobody's own, in a parent nobody can pass through."""
    require_own_network()
    require_root_with("setpriv", "a sandbox run as another user")
    require(os.access(SYSTEM_PYTHON, os.X_OK), f"{SYSTEM_PYTHON} is missing (the launcher's "
            "interpreter for nobody)", "a sandbox run as another user")
    top = Path(tempfile.mkdtemp(prefix="kanban-as-user-"))
    top.chmod(0o755)
    place = top / "ws"
    place.mkdir()
    os.chown(place, NOBODY, NOBODY)
    (place / "knock.py").write_text(KNOCK)
    (place / "enter.py").write_text(ENTER)
    yield place
    shutil.rmtree(top)


def as_nobody(workspace: Path, script: str) -> subprocess.CompletedProcess[str]:
    argv = SandboxPolicy(writable=(workspace,)).wrap(["/bin/sh", "-c", script], workspace)
    ours = os.path.realpath(sys.executable)
    launcher = argv.index(ours)  # this Python runs the launcher: nobody runs Debian's
    assert argv[launcher + 1:launcher + 3] == ["-I", "-S"], argv
    argv[launcher] = SYSTEM_PYTHON
    seccomp = SandboxPolicy(writable=()).filter_file  # root's own copy: nobody gets one
    if seccomp is not None:
        at = argv.index(str(seccomp))
        copy = workspace.parent / seccomp.name
        shutil.copyfile(seccomp, copy)
        copy.chmod(0o644)
        argv[at] = str(copy)
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           "--clear-groups", *argv], cwd=workspace, capture_output=True,
                          text=True, timeout=60, env={"PATH": os.environ["PATH"]})


def test_a_users_sandbox_has_a_network_of_its_own(workspace: Path) -> None:
    service = Listener("127.0.0.1", SECRET)
    port = service.port
    try:
        done = as_nobody(workspace, (
            "echo tap0 $(ip -o -4 addr show tap0 | grep -c 10.0.2.100); echo uid $(id -u); "
            "grep CapEff /proc/self/status; echo prohibited $(ip route | grep -c prohibit); "
            "ip route del prohibit 169.254.0.0/16 2>/dev/null && echo deleted || echo kept; "
            "touch made; "
            "python3 enter.py; "
            f"python3 knock.py 127.0.0.1:{port} 10.0.2.2:{port} 169.254.169.254:80"))
    finally:
        service.close()
    said = done.stdout.splitlines()
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert said[:3] == ["tap0 1", f"uid {NOBODY}", "CapEff:\t0000000000000000"], said
    assert said[3].startswith("prohibited ") and int(said[3].split()[1]) >= 1, said
    assert said[4] == "kept", said  # no capability where the network belongs: the routes stay
    # the namespace owning the network is not the command's, and stays shut to it
    assert said[5] == "network's Operation not permitted; parent Operation not permitted", said
    assert said[6:] == [f"refused 127.0.0.1:{port}", f"refused 10.0.2.2:{port}",
                        "refused 169.254.169.254:80"], said
    assert service.accepted == 0
    assert (workspace / "made").stat().st_uid == NOBODY  # what it made is nobody's outside
