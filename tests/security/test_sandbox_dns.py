"""Names on a sandbox's own network, and what its resolver leads to.

Most hosts name a resolver the sandbox's network namespace cannot reach itself: systemd's
stub on 127.0.0.53 (Ubuntu, Fedora), a dnsmasq on loopback, a cloud's on a link-local
address (GCE's is its metadata server, 169.254.169.254). There a sandbox reads a resolv.conf
naming slirp4netns's resolver (10.0.2.3), which asks the host's from the host's side. A
model must not turn that alias into a way to the host's loopback services: it answers
names, and nothing else answers there.

Each test runs its sandboxes in a mount namespace of its own (root, `unshare -m`) whose
/etc/resolv.conf names a resolver of the test's: a UDP server on a loopback address that
answers every question with one address.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sandbox import Listener, require_own_network, require_root_with

ANSWER = "192.0.2.123"  # TEST-NET-1: what the test's resolver says every name is
SECRET = b"loopback-service-reached"

# In the mount namespace: run each shell command of argv[2:] in a sandbox on its own
# network (workspace argv[1]) and print its exit code and output.
DRIVER = r"""
import os, sys
from pathlib import Path
from kanban.tools.hostview import own_interpreter
from kanban.tools.runner import CommandSpec, PlainRunner
from kanban.tools.sandbox import SandboxPolicy
from kanban.tools.sandbox_runner import BwrapRunner
workspace = Path(sys.argv[1])
box = BwrapRunner(SandboxPolicy(writable=(workspace,), readable=own_interpreter()),
                  PlainRunner(), session=False)
for n, command in enumerate(sys.argv[2:]):
    out = workspace / f"out{n}"
    done = box.run(CommandSpec.shell(command, cwd=workspace, output_path=out,
                                     env={"PATH": os.environ["PATH"]}, timeout_s=30))
    print(done.exit_code, out.read_text().strip().replace("\n", " | "))
"""
# Asks argv[1] (a resolver's address) for kanban.test's address over UDP port 53.
ASK = r"""
import socket, struct, sys
question = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x06kanban\x04test\x00" + \
    struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(question, (sys.argv[1], 53))
try:
    print("answered", socket.inet_ntoa(s.recv(512)[-4:]))
except OSError as exc:
    print("unanswered", exc)
"""
# Connects to argv[1]:argv[2] over TCP; prints what it read.
KNOCK = r"""
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
        print("CONNECTED", s.recv(100))
except OSError as exc:
    print("refused", exc.errno)
"""


class Resolver:
    """A resolver on `address`:53 that says every name is ANSWER, and counts questions."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.bind((address, 53))
        except OSError:
            self.sock.close()
            raise
        self.asked = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                question, peer = self.sock.recvfrom(512)
            except OSError:
                return
            self.asked += 1
            header = question[:2] + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0)
            record = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton(ANSWER)
            self.sock.sendto(header + question[12:] + record, peer)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def loopback_resolver() -> Iterator[tuple[str, Resolver]]:
    """(address, resolver) on a loopback address of its own (root binds port 53)."""
    require_own_network()
    require_root_with("unshare", "a resolv.conf of the test's own")
    for last in range(2, 250):
        address = f"127.53.{os.getpid() % 250}.{last}"
        try:
            resolver = Resolver(address)
        except OSError:
            continue
        break
    else:
        pytest.fail("no free loopback address (127.53.*.*) for the test's resolver")
    yield address, resolver
    resolver.close()


def in_sandboxes(tmp_path: Path, nameserver: str, commands: list[str]) -> list[str]:
    """Each command's "exit output" line, run in a sandbox on its own network, on a host
    whose /etc/resolv.conf names `nameserver` (in a mount namespace of its own)."""
    conf = tmp_path / "resolv.conf"
    conf.write_text(f"nameserver {nameserver}\nsearch example.invalid\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "ask.py").write_text(ASK)
    (workspace / "knock.py").write_text(KNOCK)
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(conf),
         sys.executable, "-c", DRIVER, str(workspace), *commands],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_names_resolve_when_the_hosts_resolver_is_on_loopback(
        tmp_path: Path, loopback_resolver: tuple[str, Resolver]) -> None:
    """As systemd-resolved's stub: the sandbox reads 10.0.2.3 (the host's search domains
    kept), and its questions reach the host's resolver."""
    address, resolver = loopback_resolver
    python = os.path.realpath(sys.executable)
    said = in_sandboxes(tmp_path, address, [
        "cat /etc/resolv.conf", "getent ahostsv4 kanban.test | head -1",
        f"{python} ask.py {address}"])
    assert said[0] == "0 nameserver 10.0.2.3 | search example.invalid", said
    assert said[1].startswith(f"0 {ANSWER} "), said
    # the host's resolver itself, on its loopback address, is out of reach
    assert said[2].startswith("0 unanswered"), said
    assert resolver.asked >= 1


def test_the_resolvers_alias_leads_to_no_loopback_service(
        tmp_path: Path, loopback_resolver: tuple[str, Resolver]) -> None:
    """A host whose resolver is on 127.0.0.1-like loopback, beside a loopback service: the
    alias 10.0.2.3 answers names on port 53 and connects to nothing else."""
    address, _ = loopback_resolver
    service = Listener(address, SECRET)
    port = service.port
    python = os.path.realpath(sys.executable)
    try:
        said = in_sandboxes(tmp_path, address, [
            f"{python} knock.py 10.0.2.3 {port}", f"{python} knock.py 10.0.2.3 53",
            f"{python} knock.py {address} {port}"])
    finally:
        service.close()
    assert service.accepted == 0 and all("CONNECTED" not in line for line in said), said
    assert all(line.startswith("0 refused") for line in said), said


def test_a_hosts_resolver_that_the_sandbox_reaches_is_left_as_it_is(
        tmp_path: Path) -> None:
    """Another host's resolver (an address of TEST-NET-2, not this host's): the sandbox
    reads the host's own resolv.conf."""
    require_own_network()
    require_root_with("unshare", "a resolv.conf of the test's own")
    said = in_sandboxes(tmp_path, "198.51.100.53", ["cat /etc/resolv.conf"])
    assert said == ["0 nameserver 198.51.100.53 | search example.invalid"]
