"""The seccomp filter as bytes, run through a small interpreter of classic BPF: what it
answers for a call of each kind, per machine; and the file bwrap reads it from."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import pytest

from kanban.tools import seccomp
from kanban.tools.seccomp import (
    AF_UNIX,
    CLONE3,
    CLONE_NEWUSER,
    EACCES,
    ENOSYS,
    EPERM,
    program,
    program_file,
)
from tests.support.pg import skip_or_fail

ALLOW, KILL, REFUSE = 0x7FFF0000, 0x80000000, 0x00050000 | EACCES
X86_64, AARCH64, I386 = 0xC000003E, 0xC00000B7, 0x40000003


def run(code: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """What the filter returns for one call (loads of 32-bit words, jumps, returns)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack("=HBBI", code[i:i + 8]) for i in range(0, len(code), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        if op == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif op == 0x15:
            pc += jt if acc == k else jf
        elif op == 0x35:
            pc += jt if acc >= k else jf
        elif op == 0x45:
            pc += jt if acc & k else jf
        elif op == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {op:#x}")
        pc += 1


@pytest.mark.parametrize(("machine", "arch", "socket_nr", "keyctl"), [
    ("x86_64", X86_64, 41, 250), ("aarch64", AARCH64, 198, 219)])
def test_unix_sockets_io_uring_and_keyrings_are_refused_and_the_rest_allowed(
        machine: str, arch: int, socket_nr: int, keyctl: int) -> None:
    code = program(machine)
    assert code is not None and len(code) % 8 == 0
    assert run(code, socket_nr, arch, AF_UNIX) == REFUSE
    assert run(code, socket_nr, arch, AF_UNIX | 1 << 32) == REFUSE  # the kernel reads an int
    for family in (2, 10, 16, 17):  # inet, inet6, netlink, packet: the namespace decides
        assert run(code, socket_nr, arch, family) == ALLOW
    for number in (425, 426, 427, keyctl, keyctl - 1, keyctl - 2):  # and request/add_key
        assert run(code, number, arch) == REFUSE
    for number in (0, 1, 2, 59, 53, 221):  # read, write, open, execve, socketpair...
        assert run(code, number, arch, AF_UNIX) == ALLOW
    assert run(code, socket_nr, I386, AF_UNIX) == KILL  # another ABI: socketcall and more


@pytest.mark.parametrize(("machine", "arch", "unshare", "clone"), [
    ("x86_64", X86_64, 272, 56), ("aarch64", AARCH64, 97, 220)])
def test_user_namespaces_are_refused_and_other_clones_allowed(
        machine: str, arch: int, unshare: int, clone: int) -> None:
    code = program(machine)
    assert code is not None
    eperm, enosys = 0x00050000 | EPERM, 0x00050000 | ENOSYS
    sigchld, newns, thread = 17, 0x00020000, 0x003D0F00  # fork, a mount ns, pthread_create
    assert run(code, unshare, arch, CLONE_NEWUSER) == eperm
    assert run(code, unshare, arch, CLONE_NEWUSER | newns) == eperm
    assert run(code, clone, arch, CLONE_NEWUSER | sigchld) == eperm
    assert run(code, unshare, arch, newns) == ALLOW  # no capability for it: the kernel says no
    assert run(code, clone, arch, sigchld) == ALLOW
    assert run(code, clone, arch, thread) == ALLOW
    assert run(code, CLONE3, arch) == enosys  # its flags are in memory: back to clone


def test_x32_calls_are_killed_on_x86_64() -> None:
    code = program("x86_64")
    assert code is not None
    assert run(code, 0x40000000 + 41, X86_64, AF_UNIX) == KILL
    assert run(code, 0x40000000 + 1, X86_64) == KILL


def test_no_filter_where_none_is_written() -> None:
    assert program("riscv64") is None


def test_the_file_is_the_users_own_and_rewritten_when_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if program() is None:
        skip_or_fail("no seccomp filter is written for this machine")
    monkeypatch.setattr(seccomp.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(seccomp, "_written", {})
    path = program_file()
    assert path is not None and path.read_bytes() == program()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    path.chmod(0o600)
    path.write_bytes(b"tampered")
    monkeypatch.setattr(seccomp, "_written", {})
    assert program_file() == path and path.read_bytes() == program()


def test_a_folder_others_could_write_is_not_used(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if program() is None:
        skip_or_fail("no seccomp filter is written for this machine")
    monkeypatch.setattr(seccomp.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(seccomp.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(seccomp, "_written", {})
    squatted = tmp_path / f"kanban-sandbox-{os.geteuid()}"
    squatted.mkdir(mode=0o777)
    squatted.chmod(0o777)
    path = program_file()
    assert path is not None and path.parent != squatted
    assert not any(squatted.iterdir())
