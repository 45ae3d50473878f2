"""Attacks on the host's own services from a card whose profile has a network (the default).

A model that may use the network goes for what answers only on this machine: a board's
PostgreSQL that trusts local connections, a database or an admin port on loopback, a
service bound to the host's own address, the cloud's metadata service on a link-local
address. The sandbox's network is its own (slirp4netns): other hosts answer, these do not.
"""

from __future__ import annotations

import errno
import os
import random
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.security.conftest import Attack
from tests.support.procs import wait_until
from tests.support.sandbox import (
    Listener,
    require,
    require_own_network,
    require_root_with,
)

PROFILE = ('toolsets = ["kanban", "terminal"]\napproval = "allow"\nsandbox = "required"\n'
           'network = true\n')
PYTHON = os.path.realpath(sys.executable)
GREETING = "host-service-" + uuid.uuid4().hex
# Tries each (host, port) given on the command line; prints what answered.
KNOCK = r"""
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        print("CONNECTED", target, s.recv(100).decode(errors="replace"))
    except OSError as exc:
        print("refused", target, exc.errno)
"""

# The other host's service: listens on argv[1], prints its port, greets with argv[2].
# Runs in a network namespace of its own: says so, waits until its address is set, then
# greets whoever connects.
GREETER = r"""
import socket, sys
print("in", flush=True)
sys.stdin.readline()
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
while True:
    conn, _ = server.accept()
    conn.sendall(sys.argv[2].encode())
    conn.close()
"""


def listener(host: str) -> Listener:
    return Listener(host, GREETING.encode())


def host_address() -> str:
    """This host's first address other than loopback."""
    listed = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                            text=True, check=True).stdout
    for line in listed.splitlines():
        words = line.split()
        address = words[words.index("inet") + 1].split("/")[0]
        if not address.startswith("127."):
            return address
    require(False, "this host has no address but loopback", "the host-address attack")
    raise AssertionError("unreachable")


def knock(attack: Attack, targets: list[str]) -> str:
    card, seen = attack.run([
        ("terminal", {"command": f"{PYTHON} -c '{KNOCK}' {' '.join(targets)}"})])
    assert attack.card(card)[0] == "done", seen
    return seen[0]


def test_the_hosts_own_services_do_not_answer_a_sandbox(attack: Attack) -> None:
    require_own_network()
    attack.configure(PROFILE)
    local, exposed = listener("127.0.0.1"), listener("0.0.0.0")  # noqa: S104 - the target
    address = host_address()
    try:
        with socket.create_connection((address, exposed.port), timeout=3):
            pass  # the host itself reaches both
        wait_until(lambda: exposed.accepted == 1, timeout=10, what="the host's own knock")
        said = knock(attack, [f"127.0.0.1:{local.port}", f"10.0.2.2:{local.port}",
                              f"{address}:{exposed.port}", f"127.0.0.1:{exposed.port}",
                              "169.254.169.254:80", "127.0.0.1:5432", "10.0.2.2:5432",
                              f"{address}:5432"])
    finally:
        local.close()
        exposed.close()
    assert "CONNECTED" not in said and GREETING not in said, said
    assert said.count("refused") == 8, said
    assert local.accepted == 0 and exposed.accepted == 1


def test_another_host_still_answers(attack: Attack, other_host: tuple[str, int]) -> None:
    """The network is not merely off: a service on another machine (a network namespace of
    its own behind a veth pair, as a host on the LAN) answers through the sandbox's NAT."""
    require_own_network()
    attack.configure(PROFILE)
    address, port = other_host
    said = knock(attack, [f"{address}:{port}"])
    assert f"CONNECTED {address}:{port} {GREETING}" in said, said


def test_a_private_network_host_does_not_answer(attack: Attack,
                                                private_host: tuple[str, int]) -> None:
    """A machine on a private network (the LAN's NAS, a cloud network's database that trusts
    whoever reaches it) is out of reach as the host's own services are, as web_fetch
    refuses it; the worker's log says so."""
    require_own_network()
    attack.configure(PROFILE)
    address, port = private_host
    said = knock(attack, [f"{address}:{port}"])
    assert f"refused {address}:{port} {errno.EACCES}\n" in said, said  # a prohibit route
    log = "\n".join(f.read_text() for f in (attack.board.home / "logs").glob("*.log"))
    assert "nor do private networks" in log, log


def test_allow_private_lets_a_private_network_answer(attack: Attack,
                                                     private_host: tuple[str, int]) -> None:
    """`[web] allow_private = true` opens private networks to the sandbox (and to web_fetch):
    the same host, the same knock, answered."""
    require_own_network()
    attack.configure(PROFILE, "[web]\nallow_private = true\n")
    address, port = private_host
    said = knock(attack, [f"{address}:{port}"])
    assert f"CONNECTED {address}:{port} {GREETING}" in said, said


def test_a_profile_that_reaches_the_host_says_so(attack: Attack) -> None:
    """reach_host = true shares the host's network, as the worker's log says."""
    require_own_network()
    attack.configure(PROFILE + "reach_host = true\n")
    local = listener("127.0.0.1")
    try:
        said = knock(attack, [f"127.0.0.1:{local.port}"])
    finally:
        local.close()
    assert f"CONNECTED 127.0.0.1:{local.port} {GREETING}" in said, said
    log = "\n".join(f.read_text() for f in (attack.board.home / "logs").glob("*.log"))
    assert "network on (the host's: reach_host)" in log, log


@pytest.fixture
def other_host() -> Iterator[tuple[str, int]]:
    """(address, port) of a TCP service that greets with GREETING on 'another host', on a
    public network (198.18/15, set aside for benchmarks)."""
    for program in ("ip", "unshare", "nsenter"):
        require_root_with(program, "another host's namespace")
    with _namespace_host("198.19") as found:
        yield found


@pytest.fixture
def private_host() -> Iterator[tuple[str, int]]:
    """The same on a private network (192.168/16), as a machine of the LAN."""
    for program in ("ip", "unshare", "nsenter"):
        require_root_with(program, "another host's namespace")
    with _namespace_host("192.168") as found:
        yield found


@contextmanager
def _namespace_host(prefix: str) -> Iterator[tuple[str, int]]:
    """A network namespace behind a veth pair, on a random /30 of `prefix`.0.0/16.

    The namespace is the greeter's own (`unshare --net`), entered by its pid: not a named
    one (`ip netns add`), whose bind mount under /run/netns went missing once between two
    `ip netns exec` in a loaded CI run ('setting the network namespace failed: Invalid
    argument'). It ends with the greeter, and the veth pair with it."""
    tag = uuid.uuid4().hex[:8]
    ours, theirs = f"kbh{tag}", f"kbo{tag}"
    net = f"{prefix}.{random.randrange(256)}.{4 * random.randrange(64)}"
    base = net.rsplit(".", 1)[0] + "."
    last = int(net.rsplit(".", 1)[1])
    host_side, far_side = f"{base}{last + 1}", f"{base}{last + 2}"

    def run(*argv: str) -> None:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:  # what it said: a failed setup is otherwise a bare 255
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: "
                               f"{done.stderr.strip()}")

    server = subprocess.Popen(["unshare", "--net", "--", sys.executable, "-c", GREETER,
                               far_side, GREETING], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    try:
        assert server.stdout.readline() == "in\n", "the greeter did not start"
        inside = ("nsenter", f"--net=/proc/{server.pid}/ns/net", "ip")
        run("ip", "link", "add", ours, "type", "veth", "peer", "name", theirs)
        run("ip", "link", "set", theirs, "netns", str(server.pid))
        run("ip", "addr", "add", f"{host_side}/30", "dev", ours)
        run("ip", "link", "set", ours, "up")
        run(*inside, "addr", "add", f"{far_side}/30", "dev", theirs)
        run(*inside, "link", "set", theirs, "up")
        run(*inside, "link", "set", "lo", "up")
        server.stdin.write("go\n")
        server.stdin.flush()
        port = int(server.stdout.readline())
        wait_until(lambda: _answers(far_side, port), timeout=10, what="the other host")
        yield far_side, port
    finally:
        server.kill()
        server.wait()
        server.stdin.close()
        server.stdout.close()
        subprocess.run(["ip", "link", "del", ours], capture_output=True)


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1) as conn:
            return conn.recv(100).decode() == GREETING
    except OSError:
        return False
