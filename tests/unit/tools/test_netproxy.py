"""The worker's proxy for a card's network list, spoken to directly on its Unix socket: what
it forwards, and the request lines it refuses before any lookup or connect."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.state.config import Profile, WebSettings
from kanban.state.network import HostList
from kanban.tools.netbridge import ProxiedRunner, bridge_argv
from kanban.tools.netproxy import MAX_HEAD_BYTES, NetProxy
from kanban.tools.runner import CommandSpec, PlainRunner
from kanban.tools.sandbox import SandboxPolicy
from kanban.worker.sandboxing import choose_runner
from tests.support.procs import wait_until
from tests.support.sandbox import REACHED, loopback_server

PINS = {"allowed.test": "127.0.0.1", "denied.test": "127.0.0.1"}


@pytest.fixture
def port() -> Iterator[int]:
    with loopback_server() as url:
        yield int(url.rsplit(":", 1)[1].strip("/"))


@pytest.fixture
def proxy() -> Iterator[NetProxy]:
    started = NetProxy(HostList(("allowed.test", "localhost"), PINS), WebSettings())
    started.start()
    yield started
    started.stop()
    assert not started.folder.exists()


def ask(proxy: NetProxy, request: bytes) -> str:
    """Send `request` raw on the proxy's socket; everything it answers, as text."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(proxy.socket_path))
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("latin-1")


def test_a_listed_host_is_reached_by_absolute_url_and_by_connect(proxy: NetProxy,
                                                                   port: int) -> None:
    plain = ask(proxy, f"GET http://allowed.test:{port}/x HTTP/1.1\r\nHost: allowed.test\r\n"
                       "Proxy-Connection: keep-alive\r\n\r\n".encode())
    assert plain.startswith("HTTP/1.0 200") and plain.endswith(REACHED), plain
    tunnel = ask(proxy, f"CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n"
                        f"GET / HTTP/1.0\r\nHost: allowed.test\r\n\r\n".encode())
    assert tunnel.startswith("HTTP/1.1 200 Connection established") and REACHED in tunnel


@pytest.mark.parametrize("line", [
    "GET http://denied.test:{port}/ HTTP/1.1",
    "CONNECT denied.test:{port} HTTP/1.1",
    "CONNECT 127.0.0.1:{port} HTTP/1.1",  # only the name is listed, not its address
    "CONNECT allowed.test.evil.test:{port} HTTP/1.1",
    "CONNECT evil.test#allowed.test:{port} HTTP/1.1",
    "CONNECT allowed.test@denied.test:{port} HTTP/1.1",
    "GET http://allowed.test@denied.test:{port}/ HTTP/1.1",
    "GET http://denied.test#@allowed.test:{port}/ HTTP/1.1",
    "CONNECT [::ffff:127.0.0.1]:{port} HTTP/1.1",
])
def test_a_host_off_the_list_gets_a_403_naming_the_list(proxy: NetProxy, port: int,
                                                        line: str) -> None:
    answer = ask(proxy, (line.format(port=port) + "\r\nHost: allowed.test\r\n\r\n").encode())
    status, _, body = answer.partition("\r\n\r\n")
    assert status.startswith("HTTP/1.1 403 host ") and "not in this card's network list" \
        in status, answer
    assert body.startswith("kanban proxy: host ") and "(allowed.test, localhost)" in body
    assert REACHED not in answer


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET http://allowed.test:{port}/ HTTP/1.1\r\nX: " + b"a" * (2 * MAX_HEAD_BYTES)
     + b"\r\n\r\n", "431"),
    (b"GET http://allowed.test:{port}@denied.test/ HTTP/1.1\r\n\r\n", "400"),
    (b"GET /relative HTTP/1.1\r\n\r\n", "400"),
    (b"CONNECT allowed.test HTTP/1.1\r\n\r\n", "400"),
    (b"CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n", "400"),
    ("CONNECT allowed.test:8\u00b2 HTTP/1.1\r\n\r\n".encode("latin-1"), "400"),
    (b"GET https://allowed.test:{port}/ HTTP/1.1\r\n\r\n", "400"),
    (b"NONSENSE\r\n\r\n", "400"),
    (b"GET http://allowed.test:{port}/ HTTP/1.1\r\n", "400"),  # the head never ends
])
def test_malformed_or_oversized_heads_are_refused(proxy: NetProxy, port: int,
                                                  request_bytes: bytes, status: str) -> None:
    answer = ask(proxy, request_bytes.replace(b"{port}", str(port).encode()))
    assert answer.startswith(f"HTTP/1.1 {status} "), answer[:200]
    assert REACHED not in answer


def test_a_listed_name_that_dns_points_at_loopback_is_refused(proxy: NetProxy,
                                                              port: int) -> None:
    answer = ask(proxy, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith("HTTP/1.1 403 localhost resolves to "), answer
    assert "loopback" in answer and REACHED not in answer


def test_without_a_sandbox_the_list_is_pointed_at_but_not_enforced(tmp_path: Path) -> None:
    profile = Profile(name="p", sandbox="off", network=("pypi.org",))
    choice = choose_runner(PlainRunner(), profile, network=profile.network,
                           workspace=tmp_path, home=tmp_path / "home")
    assert isinstance(choice.runner, ProxiedRunner)
    assert "network list (pypi.org) is not enforced" in choice.note
    choice.runner.close()


def test_a_plain_command_is_steered_through_the_bridge_with_its_exit_status(
        tmp_path: Path, port: int) -> None:
    profile = Profile(name="p", sandbox="off", network=("allowed.test",),
                      network_hosts={"allowed.test": "127.0.0.1"})
    runner = choose_runner(PlainRunner(), profile, network=profile.network,
                           workspace=tmp_path, home=tmp_path / "home").runner
    assert isinstance(runner, ProxiedRunner)
    try:
        fetch = (f"curl -sS --max-time 5 http://allowed.test:{port}/; echo; "
                 f"curl -sS --max-time 5 http://denied.test:{port}/; exit 3")
        result = runner.run(CommandSpec.shell(fetch, cwd=tmp_path, env=dict(os.environ),
                                              timeout_s=30, output_path=tmp_path / "out"))
        output = result.output_path.read_text()
        assert result.exit_code == 3, output
        assert REACHED in output and "host 'denied.test' is not in" in output, output
    finally:
        runner.close()


def test_the_commands_child_dies_with_a_killed_bridge(tmp_path: Path) -> None:
    bridge = subprocess.Popen(bridge_argv(tmp_path / "none.sock", ["sh", "-c", "echo $$; "
                                                                   "exec sleep 300"]),
                              stdout=subprocess.PIPE, text=True)
    assert bridge.stdout is not None
    with bridge.stdout:
        child = int(bridge.stdout.readline())
    bridge.kill()
    bridge.wait()
    wait_until(lambda: _gone(child), timeout=10, what="the command dies with its bridge")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


def test_a_listed_network_unshares_the_net_and_binds_only_the_proxys_folder() -> None:
    socket_path = Path("/tmp/kanban-net-x/proxy.sock")
    argv = SandboxPolicy(writable=(Path("/w"),), network=False,
                         proxy_socket=socket_path).wrap(["true"], Path("/w"))
    assert "--unshare-net" in argv
    bind = argv.index("--ro-bind", argv.index("/tmp"))
    assert argv[bind:bind + 3] == ["--ro-bind", "/tmp/kanban-net-x", "/tmp/kanban-net-x"]
    assert argv.index("--tmpfs") < bind  # the private /tmp first, the folder on top of it
