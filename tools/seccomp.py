"""A seccomp filter for sandboxed commands: no Unix sockets of their own making, no user
namespaces.

A sandbox's mounts decide which files a command sees, but a Unix socket that sits in a
folder it was granted (even read-only: connecting needs write permission on the socket,
which a read-only mount does not take away) answers it like any other, and with the host's
network the abstract ones (X11's, D-Bus's) answer too. Behind either may be a program with
more rights than the command (a container engine's socket, an agent holding keys, a
display). So in the sandbox `socket(AF_UNIX, ...)` fails with EACCES; the socket pairs a
program makes for itself (`socketpair`) still work, as do TCP and UDP where the network is
on. io_uring, which could open a socket without the `socket` call, is refused too, and so
is every call of another ABI (32-bit calls on a 64-bit kernel reach sockets through
`socketcall`, whose arguments a filter cannot read): such a process is killed.

No user namespaces either: in one of its own a command holds every capability over the
namespaces it makes there (mount, network), which is the kernel's widest attack surface for
a way out, and no tool needs it. `unshare` and `clone` asking for CLONE_NEWUSER fail with
EPERM (as where the host turns user namespaces off); `clone3`, whose flags sit in memory a
filter cannot read, answers ENOSYS, so that C libraries fall back to `clone` (as under
Docker's default profile). A program that sandboxes itself with user namespaces (a browser,
a nested bwrap) must be told not to.

Refused as well: the kernel's key store (`add_key`, `request_key`, `keyctl`: without a user
namespace of its own, which bwrap run as root does not make, a sandboxed command reads the
keys of the user's keyring), and two calls that are attack surface for no tool's use
(`bpf`, `userfaultfd`).

The filter is classic BPF over `struct seccomp_data`, written here for x86-64 and AArch64;
on other machines there is none (`program()` is None) and the sandbox says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import stat
import struct
import tempfile
from pathlib import Path

from kanban.tools.replace_file import replace_file

AF_UNIX = 1
EPERM, EACCES, ENOSYS = 1, 13, 38
CLONE_NEWUSER = 0x10000000
CLONE3 = 435  # one number on both machines
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_NR, _ARCH, _ARG0 = 0, 4, 16
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_X32 = 0x40000000  # x86-64's other ABI: the same calls with this bit set
IO_URING = (425, 426, 427)  # io_uring_setup, _enter, _register (one table on both)
# machine: (audit arch, socket's number, whether x32 calls exist, the other calls refused:
# add_key, request_key, keyctl, bpf, userfaultfd, then io_uring's; unshare's and clone's
# numbers)
_MACHINES = {"x86_64": (0xC000003E, 41, True, (248, 249, 250, 321, 323, *IO_URING), 272, 56),
             "aarch64": (0xC00000B7, 198, False, (217, 218, 219, 280, 282, *IO_URING), 97,
                         220)}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one) as bwrap's --seccomp reads it (an
    array of struct sock_filter), or None where none is written."""
    found = _MACHINES.get(machine or platform.machine())
    if found is None:
        return None
    arch, socket_nr, x32, refused, unshare_nr, clone_nr = found
    refuse = _ERRNO | EACCES
    # Jumps count the instructions they skip; each block below ends in a return.
    body = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, arch, jt=1),  # another ABI: killed
        _insn(_RET_K, _KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
    ]
    if x32:
        body += [_insn(_JGE_K, _X32, jf=1), _insn(_RET_K, _KILL_PROCESS)]
    for number in refused:
        body += [_insn(_JEQ_K, number, jf=1), _insn(_RET_K, refuse)]
    body += [
        _insn(_JEQ_K, CLONE3, jf=1),
        _insn(_RET_K, _ERRNO | ENOSYS),
        _insn(_JEQ_K, unshare_nr, jt=1),
        _insn(_JEQ_K, clone_nr, jf=4),
        _insn(_LD_W_ABS, _ARG0),  # the flags (their low half holds CLONE_NEWUSER)
        _insn(_JSET_K, CLONE_NEWUSER, jf=1),
        _insn(_RET_K, _ERRNO | EPERM),
        _insn(_RET_K, _ALLOW),
    ]
    body += [
        _insn(_JEQ_K, socket_nr, jf=3),
        _insn(_LD_W_ABS, _ARG0),  # the family (the low half of the first argument)
        _insn(_JEQ_K, AF_UNIX, jf=1),
        _insn(_RET_K, refuse),
        _insn(_RET_K, _ALLOW),
    ]
    return b"".join(body)


_written: dict[bytes, Path] = {}


def program_file() -> Path | None:
    """This machine's filter in a file of this user's only (bwrap reads it from a
    descriptor: the wrapped command opens it first); None where there is no filter.
    Written once per content, in a folder of the user's own under the temporary folder,
    and checked there (a real folder, ours, closed to others) each time."""
    code = program()
    if code is None:
        return None
    path = _written.get(code)
    if path is not None and _is_ours(path.parent) and path.is_file():
        return path
    folder = _private_folder()
    path = folder / f"unix-sockets-{hashlib.sha256(code).hexdigest()[:16]}.bpf"
    try:
        if path.read_bytes() == code:
            _written[code] = path
            return path
    except OSError:
        pass
    replace_file(path, code, mode=0o400)
    _written[code] = path
    return path


def _private_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / f"kanban-sandbox-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    if _is_ours(folder):
        return folder
    return Path(tempfile.mkdtemp(prefix="kanban-sandbox-"))  # someone else's name: our own


def _is_ours(folder: Path) -> bool:
    try:
        info = folder.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            and info.st_mode & 0o077 == 0)
