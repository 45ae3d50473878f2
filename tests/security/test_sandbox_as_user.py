"""A sandbox's own network when kanban runs as a user other than root (as most people run
it): the host's loopback services stay out of reach there too.

bwrap, run by a user, makes a user namespace for the sandbox. The launcher has it map the
user to root there, with no capability left for the command, so that slirp4netns and ip,
entering it as its owner, can configure the network. The test builds a sandbox's command
line as the worker does, then runs it as `nobody` (setpriv), with Debian's own Python for
the launcher (this suite's interpreter lives under /root, out of nobody's reach).
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
            f"python3 knock.py 127.0.0.1:{port} 10.0.2.2:{port} 169.254.169.254:80"))
    finally:
        service.close()
    said = done.stdout.splitlines()
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert said[:3] == ["tap0 1", "uid 0", "CapEff:\t0000000000000000"], said
    assert said[3].startswith("prohibited ") and int(said[3].split()[1]) >= 1, said
    assert said[4] == "kept", said  # root there holds no capability: the routes stay
    assert said[5:] == [f"refused 127.0.0.1:{port}", f"refused 10.0.2.2:{port}",
                        "refused 169.254.169.254:80"], said
    assert service.accepted == 0
    assert (workspace / "made").stat().st_uid == NOBODY  # root inside is nobody outside
