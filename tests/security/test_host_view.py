"""Attacks on the host view of a sandboxed command: the dispatcher's HOME and its keys,
/root, other homes, /etc's secrets, host sockets under /run, other processes' /proc. A card
reads the system, its own HOME, a private /tmp and exactly what its profile grants."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kanban.tools.hostview import own_interpreter
from tests.security.conftest import Attack
from tests.support.pg import skip_or_fail
from tests.support.procs import kanban

REACHED = "unix-socket-reached-" + uuid.uuid4().hex
PROBE_SOCKET = ("python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); "
                "s.settimeout(3); s.connect(sys.argv[1]); print(s.recv(200).decode())' {path}")
ABSTRACT = ("python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); "
            "s.connect(chr(0) + \"{name}\"); print(\"CONNECTED\")'")


def configure(attack: Attack, *, network: bool = False, extra: str = "") -> None:
    attack.configure(f"""
toolsets = ["kanban", "terminal"]
approval = "allow"
sandbox = "required"
network = {str(network).lower()}
{extra}""")


def terminal(command: str) -> tuple[str, dict[str, str]]:
    return ("terminal", {"command": command})


@contextmanager
def unix_server(path: Path) -> Iterator[Path]:
    """A Unix socket at `path` that greets every connection with REACHED."""
    path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(REACHED.encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()
        server.close()


def probe_abstract(attack: Attack, *, network: bool) -> tuple[int, str]:
    """A card's command connecting to an abstract Unix socket the host listens on (no file:
    only a network namespace, or no Unix sockets at all, keeps it out); its card and what
    it printed."""
    name = f"kanban-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX)
    server.bind("\0" + name)
    server.listen()
    try:
        configure(attack, network=network)
        card, (probe,) = attack.run([terminal(ABSTRACT.format(name=name))])
    finally:
        server.close()
    return card, probe


@pytest.fixture
def dispatcher_home(attack: Attack) -> Iterator[Path]:
    """A HOME for the dispatcher outside /tmp (private in every sandbox anyway), holding
    the canary key file."""
    home = Path("/var/tmp") / f"kanban-canary-home-{uuid.uuid4().hex}"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_canary").write_text(attack.canaries.file_secret + "\n")
    (home / ".config" / "kanban").mkdir(parents=True)
    (home / ".config" / "kanban" / "env").write_text(
        f"OPENAI_API_KEY={attack.canaries.openai_key}\n")
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_dispatchers_home_and_the_host_homes_are_not_there(
        attack: Attack, sandboxed: None, dispatcher_home: Path) -> None:
    configure(attack)
    home = dispatcher_home
    card, seen = attack.run([
        terminal("cat ~/.ssh/id_canary ~/.config/kanban/env; echo HOME=$HOME"),
        terminal(f"cat {home}/.ssh/id_canary {home}/.config/kanban/env; ls -la {home}"),
        terminal(f"cat {attack.canaries.secret_file}; ls -A /root; echo HOMES:; ls -A /home"),
        terminal("cat /proc/1/environ | tr '\\0' '\\n'; ls /proc | grep -E '^[0-9]+$' | "
                 "tr '\\n' ' '"),
    ], env={"HOME": str(home)})
    assert attack.card(card)[0] == "done", attack.card(card)
    own_home, canary, hosts, procs = seen
    assert "HOME=" + str(attack.board.home / "homes") in own_home, own_home
    assert str(home) not in own_home.split("HOME=")[1]
    assert "No such file or directory" in canary and "total " not in canary, canary
    assert attack.canaries.file_secret not in canary
    root_entries = set(os.listdir("/root")) if os.access("/root", os.R_OK) else set()
    shown = hosts.split("HOMES:")[0].split()
    python = {p.relative_to("/root").parts[0] for p in own_interpreter()
              if p.is_relative_to("/root")}  # the way to kanban's own Python, bound alone
    assert not root_entries & set(shown) - python, hosts
    assert "/home': No such file or directory" in hosts.split("HOMES:")[1], hosts
    for pid in procs.split("exit code")[-1].split():
        assert not pid.isdigit() or int(pid) < 50, procs
    attack.assert_contained()


@pytest.fixture
def host_key(attack: Attack) -> Iterator[Path]:
    """A world-readable ssh host key in /etc (a misconfigured host): named secrets are
    hidden whatever their mode."""
    if not os.access("/etc/ssh", os.W_OK):
        skip_or_fail("cannot plant a host key in /etc/ssh as this user")
    key = Path("/etc/ssh") / f"ssh_host_kanbantest{uuid.uuid4().hex}_key"
    key.write_text(attack.canaries.file_secret + "\n")
    key.chmod(0o644)
    try:
        yield key
    finally:
        key.unlink()


def test_etc_is_there_without_its_secrets(attack: Attack, sandboxed: None,
                                          host_key: Path) -> None:
    configure(attack)
    card, (etc,) = attack.run([terminal(
        f"cat /etc/shadow /etc/gshadow {host_key}; ls /etc/ssl/private; head -1 /etc/passwd; "
        "echo ETC-OK")])
    assert attack.card(card)[0] == "done"
    assert "ETC-OK" in etc and "root:" in etc  # passwd is there
    shadow = Path("/etc/shadow")
    if os.access(shadow, os.R_OK):  # as root: the host's password hashes must not show
        for line in shadow.read_text().splitlines():
            assert line not in etc, etc
    attack.assert_contained()


def test_run_is_not_there_to_list(attack: Attack, sandboxed: None) -> None:
    configure(attack, network=True)
    card, (listing,) = attack.run([terminal("ls -A /run /var/run; echo LISTED")])
    assert attack.card(card)[0] == "done"
    assert "No such file or directory" in listing and "LISTED" in listing, listing
    for name in ("postgresql", "systemd", "dbus", "docker.sock"):
        assert f"\n{name}\n" not in listing, listing
    attack.assert_contained()


@pytest.mark.parametrize("network", [False, True])
def test_a_host_unix_socket_under_run_is_unreachable(attack: Attack, sandboxed: None,
                                                     network: bool) -> None:
    if not os.access("/run", os.W_OK):
        skip_or_fail("cannot place a socket under /run as this user")
    folder = Path("/run") / f"kanban-test-{uuid.uuid4().hex}"
    try:
        with unix_server(folder / "sock") as path:
            configure(attack, network=network)
            card, (probe,) = attack.run([terminal(PROBE_SOCKET.format(path=path))])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert attack.card(card)[0] == "done"
    assert REACHED not in probe and "exit code 1" in probe, probe
    attack.assert_contained()


def test_an_abstract_unix_socket_is_cut_without_the_network(attack: Attack,
                                                            sandboxed: None) -> None:
    card, probe = probe_abstract(attack, network=False)
    assert attack.card(card)[0] == "done"
    assert "CONNECTED" not in probe and "exit code 1" in probe, probe


def test_a_profile_grants_exactly_its_read_and_write_paths(
        attack: Attack, sandboxed: None, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("grants")  # beside the board's folder, not in it
    readable, writable, other = (outside / "ref", outside / "out", outside / "other")
    for folder in (readable, writable, other):
        folder.mkdir()
        (folder / "note.txt").write_text(f"note in {folder.name}\n")
    configure(attack, extra=f'sandbox_read = ["{readable}"]\nsandbox_write = ["{writable}"]')
    card, (read, wrote, elsewhere) = attack.run([
        terminal(f"cat {readable}/note.txt; echo x > {readable}/new.txt"),
        terminal(f"cat {writable}/note.txt; echo y > {writable}/new.txt && echo WROTE"),
        terminal(f"cat {other}/note.txt"),
    ])
    assert attack.card(card)[0] == "done"
    assert "note in ref" in read and "Read-only file system" in read, read
    assert not (readable / "new.txt").exists()
    assert "note in out" in wrote and "WROTE" in wrote
    assert (writable / "new.txt").read_text() == "y\n"
    assert "No such file or directory" in elsewhere and "note in other" not in elsewhere
    attack.assert_contained()


def test_a_grant_into_the_board_folder_or_a_socket_place_is_refused_at_load(
        attack: Attack) -> None:
    for grant, reason in [(f'sandbox_read = ["{attack.board.home}"]', "the board's folder"),
                          ('sandbox_write = ["/run/postgresql"]', "host socket place"),
                          ('sandbox_write = ["/tmp"]', "host socket place"),
                          ('sandbox_read = ["/tmp/.X11-unix"]', "host socket place"),
                          ('sandbox_read = ["home/me"]', "not an absolute path")]:
        configure(attack, extra=grant)
        refused = kanban(attack.board.path, "dispatch", "--once", check=False)
        assert refused.returncode != 0 and reason in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("network", [False, True])
def test_an_agent_socket_in_the_hosts_tmp_is_unreachable_even_with_the_network(
        attack: Attack, sandboxed: None, network: bool) -> None:
    """ssh-agent, tmux and X11 put their sockets in /tmp: the card's /tmp is its own."""
    folder = Path("/tmp") / f"ssh-kanban{uuid.uuid4().hex[:10]}"
    try:
        with unix_server(folder / "agent.4242") as path:
            configure(attack, network=network)
            card, (probe, listing) = attack.run([
                terminal(PROBE_SOCKET.format(path=path)),
                terminal(f"ls -A /tmp; ls {folder}; echo LISTED")])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert attack.card(card)[0] == "done"
    assert REACHED not in probe and "exit code 1" in probe, probe
    assert folder.name not in listing.split(str(folder))[0] and "LISTED" in listing, listing
    attack.assert_contained()


MCP_SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"


def test_a_stdio_mcp_server_sees_the_same_minimal_host(
        attack: Attack, sandboxed: None, dispatcher_home: Path) -> None:
    """The wall of commands holds for a stdio MCP server too: the dispatcher's HOME and its
    key files, /root, /etc/shadow and a socket under /run are not there without the
    network."""
    if not os.access("/run", os.W_OK) or not os.access("/root", os.W_OK):
        skip_or_fail("cannot place a socket under /run and a file in /root as this user")
    folder = Path("/run") / f"kanban-test-{uuid.uuid4().hex}"
    in_root = Path("/root") / f"kanban-canary-{uuid.uuid4().hex}"
    in_root.write_text(attack.canaries.file_secret + "\n")
    paths = [str(dispatcher_home / ".ssh" / "id_canary"),
             str(dispatcher_home / ".config" / "kanban" / "env"), str(in_root), "/etc/shadow",
             "/etc/hostname"]
    try:
        with unix_server(folder / "sock") as sock:
            attack.configure(
                'toolsets = ["kanban", "mcp:test"]\nsandbox = "required"\nnetwork = false',
                f'[mcp.test]\ncommand = "{sys.executable}"\nargs = ["{MCP_SERVER}"]\n')
            card, (peek,) = attack.run([("test__peek", {"paths": paths,
                                                        "sockets": [str(sock)]})],
                                       env={"HOME": str(dispatcher_home)})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        in_root.unlink()
    assert attack.card(card)[0] == "done", attack.card(card)
    seen = dict(line.split(": ", 1) for line in peek.splitlines())
    assert seen.pop("/etc/hostname").startswith("read"), peek  # the server did read files
    for path in [*paths[:-1], str(folder / "sock")]:
        assert not seen[path].startswith(("read", "answered")), (path, peek)
    assert REACHED not in peek and attack.canaries.file_secret not in peek
    attack.assert_contained()
