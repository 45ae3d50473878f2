"""Attacks through system calls the mounts do not govern (kanban.tools.seccomp): Unix
sockets (one in a folder the profile grants, which read-only does not stop; an abstract
one of the host's while the network is on; io_uring's way around the socket call; a
network-list card's own proxy socket reached past its bridge) and the user's kernel
keyring. A sandboxed command makes no Unix socket at all; the socket pairs programs make
for themselves still work."""

from __future__ import annotations

import ctypes
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.conftest import Attack
from tests.security.test_host_view import (
    PROBE_SOCKET,
    REACHED,
    configure,
    probe_abstract,
    terminal,
    unix_server,
)
from tests.support.pg import skip_or_fail

IO_URING = ("python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
            "params = ctypes.create_string_buffer(120); r = libc.syscall(425, 4, params); "
            "print(\"IO_URING\", r, ctypes.get_errno())'")
KEY_SPEC_USER_KEYRING = -4
ADD_KEY, REQUEST_KEY, KEYCTL, KEYCTL_READ, KEYCTL_INVALIDATE = 248, 249, 250, 11, 21
READ_KEY = ("python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
            "libc.syscall.restype = ctypes.c_long; "
            "key = libc.syscall(249, b\"user\", sys.argv[1].encode(), None, 0); "
            "print(\"KEY\", key, ctypes.get_errno()); buf = ctypes.create_string_buffer(200); "
            "n = libc.syscall(250, 11, key, buf, 200) if key > 0 else -1; "
            "print(\"READ\", buf.raw[:max(n, 0)].decode())' {name}")
PAIRS = ("python3 -c 'import asyncio, socket; a, b = socket.socketpair(); a.send(b\"p\"); "
         "assert b.recv(1) == b\"p\"; asyncio.run(asyncio.sleep(0)); print(\"PAIRS-OK\")'")


@pytest.mark.parametrize(("grant", "network"), [("sandbox_read", False),
                                                ("sandbox_write", False),
                                                ("sandbox_read", True)])
def test_a_socket_in_a_granted_folder_does_not_answer(attack: Attack, sandboxed: None,
                                                      grant: str, network: bool) -> None:
    """A container engine's or a key agent's socket, in a folder the user granted."""
    folder = Path("/var/tmp") / f"kanban-grant-{uuid.uuid4().hex[:10]}"
    try:
        with unix_server(folder / "engine.sock") as path:
            configure(attack, network=network, extra=f'{grant} = ["{folder}"]')
            card, (listed, probe, pairs) = attack.run([
                terminal(f"ls -l {path}; echo LISTED"),  # the socket is there to see
                terminal(PROBE_SOCKET.format(path=path)),
                terminal(PAIRS)])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert attack.card(card)[0] == "done"
    assert "LISTED" in listed and "engine.sock" in listed, listed
    assert REACHED not in probe and "Permission denied" in probe, probe
    assert "PAIRS-OK" in pairs, pairs
    attack.assert_contained()


def test_an_abstract_socket_of_the_host_does_not_answer_with_the_network(
        attack: Attack, sandboxed: None) -> None:
    """X11 and older D-Bus listen on abstract names: the host's network namespace has
    them, so a card with the network could reach a display (keystrokes, screenshots)."""
    card, probe = probe_abstract(attack, network=True)
    assert attack.card(card)[0] == "done"
    assert "CONNECTED" not in probe and "Permission denied" in probe, probe
    attack.assert_contained()


# clone(CLONE_NEWUSER | SIGCHLD) made directly (a program need not use unshare(1)), by
# this machine's number for clone
CLONE_USER = ("python3 -c 'import ctypes, os, platform; libc = ctypes.CDLL(None, use_errno=True); "
              "nr = {\"x86_64\": 56, \"aarch64\": 220}[platform.machine()]; "
              "r = libc.syscall(nr, 0x10000000 | 17, 0, 0, 0, 0); "
              "os._exit(0) if r == 0 else print(\"CLONE\", r, ctypes.get_errno())'")
WORKS = ("python3 -c 'import subprocess, threading; t = threading.Thread(target=print, "
         "args=(\"THREAD-OK\",)); t.start(); t.join(); "
         "print(subprocess.run([\"echo\", \"SPAWN-OK\"], capture_output=True, text=True)"
         ".stdout.strip())'")


def test_no_user_namespace_can_be_made(attack: Attack, sandboxed: None) -> None:
    """In a user namespace of its own a command holds every capability over the mount and
    network namespaces it makes there: the kernel's widest surface for a way out (with
    the network on, too). Threads and child processes still start (clone3 falls back)."""
    configure(attack, network=True)
    card, (shell, direct, works) = attack.run([
        terminal("unshare --user --net sh -c 'echo INSIDE'; echo rc=$?"),
        terminal(CLONE_USER), terminal(WORKS)])
    assert attack.card(card)[0] == "done"
    assert "INSIDE" not in shell and "Operation not permitted" in shell, shell
    assert "CLONE -1 1" in direct, direct
    assert "THREAD-OK" in works and "SPAWN-OK" in works, works
    attack.assert_contained()


def test_io_uring_is_refused(attack: Attack, sandboxed: None) -> None:
    """io_uring opens sockets (IORING_OP_SOCKET) without the call the filter watches."""
    configure(attack, network=True)
    card, (probe,) = attack.run([terminal(IO_URING)])
    assert attack.card(card)[0] == "done"
    assert "IO_URING -1 13" in probe, probe
    attack.assert_contained()


def test_a_network_list_cards_command_cannot_reach_its_proxy_past_the_bridge(
        attack: Attack, sandboxed: None) -> None:
    """The bridge (the command's parent) reaches the proxy's socket; the command may not
    make a socket of its own to talk to the proxy, or anything beside it, directly."""
    attack.configure("""
toolsets = ["kanban", "terminal"]
approval = "allow"
sandbox = "required"
network = ["allowed.test"]
network_hosts = { "allowed.test" = "127.0.0.1" }
""")
    find = "tr '\\0' '\\n' < /proc/$PPID/cmdline | grep '[.]sock$'"
    card, (found, probe, pairs) = attack.run([
        terminal(find),
        terminal(PROBE_SOCKET.format(path=f"$({find})")),
        terminal(PAIRS)])
    assert attack.card(card)[0] == "done"
    assert ".sock" in found, found
    assert "Permission denied" in probe, probe
    assert "PAIRS-OK" in pairs, pairs
    attack.assert_contained()


@pytest.fixture
def user_key(attack: Attack) -> Iterator[str]:
    """A canary in this user's kernel keyring (where ticket caches and key agents keep
    secrets); its description."""
    import platform

    if platform.machine() != "x86_64":
        skip_or_fail("the key calls are numbered here for x86-64")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    name = f"kanban-canary-{uuid.uuid4().hex[:12]}"
    secret = attack.canaries.file_secret.encode()
    key = libc.syscall(ADD_KEY, b"user", name.encode(), secret, len(secret),
                       KEY_SPEC_USER_KEYRING)
    if key < 0:
        skip_or_fail(f"this host keeps no keyring for us (errno {ctypes.get_errno()})")
    try:
        yield name
    finally:
        libc.syscall(KEYCTL, KEYCTL_INVALIDATE, key)


def test_the_users_kernel_keyring_is_out_of_reach(attack: Attack, sandboxed: None,
                                                  user_key: str) -> None:
    """bwrap run as root makes no user namespace, so without the filter the sandbox shares
    the user's keyring and reads every key in it."""
    configure(attack, network=True)
    card, (probe,) = attack.run([terminal(READ_KEY.format(name=user_key))])
    assert attack.card(card)[0] == "done"
    assert "KEY -1 13" in probe, probe
    assert attack.canaries.file_secret not in probe
    attack.assert_contained()


def test_a_bwrap_planted_in_the_workspace_is_not_what_starts_the_sandbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command starts in its workspace: with a relative entry in PATH (".", or an empty
    one, which some users' shells leave), a `bwrap` the model wrote there would be found
    first and run the next command with no sandbox at all."""
    from kanban.tools.runner import CommandSpec
    from kanban.tools.sandbox import SandboxPolicy
    from kanban.tools.sandbox_runner import BwrapRunner
    from tests.support.sandbox import require_bwrap

    require_bwrap()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    planted = workspace / "bwrap"
    ran = tmp_path / "planted-ran"
    planted.write_text(f"#!/bin/sh\ntouch {ran}\nwhile [ \"$1\" != -- ]; do shift; done\n"
                       "shift\nexec \"$@\"\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f":.:{os.environ['PATH']}")
    runner = BwrapRunner(SandboxPolicy(writable=(workspace,), network=False), session=False)
    try:
        result = runner.run(CommandSpec.shell(
            "ls /root >/dev/null 2>&1 && echo HOST-ROOT || echo SANDBOXED", cwd=workspace,
            env={"PATH": os.environ["PATH"]}, timeout_s=30, output_path=tmp_path / "out"))
    finally:
        runner.close()
    assert result.exit_code == 0, (tmp_path / "out").read_text()
    assert not ran.exists()
    assert "SANDBOXED" in (tmp_path / "out").read_text()
