"""A network of the sandbox's own: what `network = true` gives a sandboxed command.

With the host's network a command reaches everything the host reaches, the host's own
services included: a PostgreSQL board whose server trusts local connections, a Redis or an
admin port on loopback, the cloud's metadata service (169.254.169.254, which hands out the
machine's credentials). So a sandbox with a network gets a network namespace of its own,
whose only way out is slirp4netns (user-mode NAT, as rootless containers use): other hosts
answer as they would the host, but the host's loopback is refused (slirp4netns
--disable-host-loopback), and routes inside the namespace prohibit the host's own
addresses and link-local ones. The command holds no capability, so it cannot change them.

Setting that up needs bwrap's sandbox pid before the command starts, so the wrapped command
is a small launcher (`LAUNCHER`, this Python run isolated) that starts bwrap with
--info-fd, attaches slirp4netns, adds the routes, then lets the command run (`gated`) and
passes its exit status (or signal) on. Where slirp4netns or ip is missing, or the
probe fails, `check_own_network` says why and commands keep the host's network.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from kanban.tools.replace_file import replace_file

PROBE_TIMEOUT_S = 10.0
# Blocked inside the namespace beside the host's own addresses (read at each start):
# link-local, where cloud metadata services answer.
PROHIBITED = ("169.254.0.0/16",)
# ... and, unless `[web] allow_private` says otherwise, private networks: the LAN's other
# machines, a cloud network's databases and admin ports (which often trust whoever reaches
# them), and carrier-grade NAT's range (Tailscale's). slirp4netns's own 10.0.2.0/24 stays
# reachable inside: its route is the more specific one.
PRIVATE = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
_PRIVATE_NETS = tuple(ipaddress.ip_network(n) for n in PRIVATE)


def prohibited(private: bool) -> tuple[str, ...]:
    """The networks a sandbox's own network refuses (beside the host's own addresses);
    `private`: whether private networks answer."""
    return PROHIBITED if private else (*PROHIBITED, *PRIVATE)
# Inside, first word on one descriptor that bwrap's own set-up is done (it brings the
# namespace's loopback up: the launcher's routes and slirp4netns meanwhile made it fail,
# "loopback: Failed RTM_NEWADDR"); then the command waits on another for the launcher's word
# that the network is up (`gated`). A launcher that failed or was killed closes it unsaid,
# and the command never runs (bwrap's own --block-fd would let it run on the end of file).
# The launcher picks both numbers among those free in it, and writes them in for @UP@ and
# @GO@: a fixed number could be a descriptor passed through (a shared sandbox's socket).
_GATE = ('echo up >&@UP@; exec @UP@>&-; '
         'IFS= read -r go <&@GO@ && [ "$go" = go ] || exit 126; exec @GO@<&-; exec "$@"')

# argv: slirp4netns, ip, the networks to prohibit (comma-separated), then bwrap's argv.
# Self-contained (`python -I -S`), built-in modules only. Exit 126 with one line on stderr
# when the network cannot be made: the command never runs on a network other than its own.
LAUNCHER = r"""
import os, sys, ctypes, fcntl, _signal
parent = os.getppid()
libc = ctypes.CDLL(None)
libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: die with our starter
if os.getppid() != parent:
    os._exit(126)
slirp, ip, prohibit, bwrap = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

def pipe():  # above 9: the numbers below are left to what was passed through, and the gate
    ends = os.pipe()
    moved = [fcntl.fcntl(end, fcntl.F_DUPFD_CLOEXEC, 10) for end in ends]
    for end in ends:
        os.close(end)
    return moved

info_r, info_w = pipe()
up_r, up_w = pipe()
gate_r, gate_w = pipe()
exit_r, exit_w = pipe()
ready_r, ready_w = pipe()

def start(argv, keep=(), stdin=None, out=None, gate=None, netns=None):
    pid = os.fork()
    if pid == 0:
        try:
            if netns is not None:
                if os.geteuid() != 0:  # its user namespace first (CLONE_NEWUSER), as its root
                    if libc.setns(os.open("/proc/%d/ns/user" % netns, os.O_RDONLY),
                                  0x10000000):
                        os._exit(126)
                    os.setresgid(0, 0, 0)
                    os.setresuid(0, 0, 0)  # so the program it runs keeps the capabilities
                if libc.setns(os.open("/proc/%d/ns/net" % netns, os.O_RDONLY), 0x40000000):
                    os._exit(126)  # CLONE_NEWNET
            for fd in keep:
                os.set_inheritable(fd, True)
            if gate:  # onto numbers free here: nothing passed through is lost
                os.dup2(up_w, gate[0])
                os.dup2(gate_r, gate[1])
            if stdin is not None:
                os.dup2(stdin, 0)
            if out is not None:
                os.dup2(out, 1)
                os.dup2(out, 2)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    return pid

def hold(pid):
    # Not root: a process of the launcher's that joins the user namespace owning the
    # sandbox's network as its root, and its network, and stays till `release`: the pid
    # slirp4netns and ip enter by. The command's own namespace is the nested one, where
    # root is not mapped: slirp4netns, entering that, could not become root.
    joined_r, joined_w = pipe()
    stay_r, stay_w = pipe()
    holder = os.fork()
    if holder == 0:
        try:
            libc.prctl(1, 9, 0, 0, 0)
            for fd in (gate_w, exit_r, exit_w, ready_r, ready_w, joined_r, stay_w):
                os.close(fd)  # so that their other ends see the launcher's exit alone
            net = os.open("/proc/%d/ns/net" % pid, os.O_RDONLY)
            owner = fcntl.ioctl(net, 0xb701)  # NS_GET_USERNS: the one the network belongs to
            if libc.setns(owner, 0x10000000) == 0:  # CLONE_NEWUSER
                os.setresgid(0, 0, 0)
                os.setresuid(0, 0, 0)
                if libc.setns(net, 0x40000000) == 0:  # CLONE_NEWNET
                    os.write(joined_w, b"1")
                    os.read(stay_r, 1)  # the launcher's end closed, or the launcher gone
        finally:
            os._exit(0)
    for fd in (joined_w, stay_r):
        os.close(fd)
    joined = os.read(joined_r, 1) == b"1"
    os.close(joined_r)
    return holder, stay_w, joined

def release(holder, stay_w):
    os.close(stay_w)
    os.waitpid(holder, 0)

def fail(why, child):
    # The command waits inside for a word on the gate: ended here, it never gets one.
    sys.stderr.write("kanban: the sandbox's own network did not start: " + why + "\n")
    sys.stderr.flush()
    if child:
        try:
            os.kill(child, 9)
            os.waitpid(child, 0)
        except OSError:
            pass
    os._exit(126)

def status(pid):
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

used = set(int(n) for n in os.listdir("/proc/self/fd"))
numbers = [n for n in range(3, 10) if n not in used][:2]  # the shell takes one digit
if len(numbers) < 2:
    fail("no two descriptors below 10 are free for the command's gate", None)
at = next(i for i, a in enumerate(bwrap) if a.startswith("echo up >&@UP@"))
bwrap[at] = bwrap[at].replace("@UP@", str(numbers[0])).replace("@GO@", str(numbers[1]))
# Not root: bwrap makes a user namespace for the sandbox. For its own set-up (--dev) it maps
# this user to root in it, and that outer namespace owns the network; the command then runs
# in a namespace nested in it that maps root back to this user, with no capability. So the
# command sees its own uid, and slirp4netns and ip, entering the outer one as its root
# through `hold` below, may configure the network.
userns = [] if os.geteuid() == 0 else ["--unshare-user", "--cap-drop", "ALL"]
child = start([bwrap[0], "--unshare-net", *userns, "--info-fd", str(info_w)] + bwrap[1:],
              keep=(info_w,), gate=numbers)
for fd in (info_w, up_w, gate_r):
    os.close(fd)
info = b""
while b"}" not in info:
    chunk = os.read(info_r, 4096)
    if not chunk:
        break
    info += chunk
os.close(info_r)
try:
    pid = int(info.split(b'"child-pid"', 1)[1].split(b":", 1)[1].split(b",")[0]
              .split(b"}")[0].strip())
except (IndexError, ValueError):
    fail("bwrap did not start", child)
if os.read(up_r, 3) != b"up\n":  # bwrap's set-up done, the command's gate reached
    fail("bwrap did not start", child)
os.close(up_r)
target, holder = pid, None
if userns:
    holder, stay_w, joined = hold(pid)
    if not joined:
        release(holder, stay_w)
        fail("its user namespace could not be entered", child)
    target = holder
null = os.open("/dev/null", os.O_WRONLY)
nat = start([slirp, "--configure", "--mtu=65520", "--disable-host-loopback",
             "--enable-sandbox", "--enable-seccomp", "--ready-fd",
             str(ready_w), "--exit-fd", str(exit_r)]
            + [str(target), "tap0"], keep=(ready_w, exit_r), out=null)
for fd in (ready_w, exit_r):
    os.close(fd)
if os.read(ready_r, 1) != b"1":
    fail("slirp4netns ended", child)
os.close(ready_r)
# The host's own addresses and broadcast ones (this namespace's, as the kernel's routing
# trie lists them) and link-local ones: prohibited inside
routes, last = [p.encode() for p in prohibit.split(",") if p], b""
with open("/proc/net/fib_trie", "rb") as trie:
    for line in trie:
        if b"|--" in line:
            last = line.split()[-1]
        elif (b"/32 host LOCAL" in line or b"/32 link BROADCAST" in line) and \
                not last.startswith(b"127.") and last + b"/32" not in routes:
            routes.append(last + b"/32")
batch_r, batch_w = os.pipe()
router = start([ip, "-batch", "-"], stdin=batch_r, out=null, netns=target)
os.close(batch_r)
os.write(batch_w, b"".join(b"route add prohibit " + r + b"\n" for r in routes))
os.close(batch_w)
routed = status(router) == 0
if holder is not None:
    release(holder, stay_w)
if not routed:
    fail("the namespace's routes could not be set", child)
os.close(null)
for number in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
    _signal.signal(number, lambda n, frame: os.kill(child, n))
os.write(gate_w, b"go\n")
os.close(gate_w)
code = status(child)
os.kill(nat, 9)  # its namespace is gone: nothing to finish. Not waited for: its exit tears
# the namespace's device down (RCU grace periods, 15 ms and more); whoever adopts it reaps it
if code < 0:
    _signal.signal(-code, _signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code & 255)
"""


@dataclass(frozen=True)
class OwnNetwork:
    """Whether a sandbox can have a network of its own here, with the programs it takes."""

    programs: tuple[str, str] | None  # slirp4netns, ip (None: it cannot)
    reason: str  # one line: what a sandbox with a network gets, or why not its own

    @property
    def available(self) -> bool:
        return self.programs is not None


def gated(argv: Sequence[str]) -> list[str]:
    """`argv` run in the sandbox once the launcher says its network is up."""
    return ["/bin/sh", "-c", _GATE, "sh", *argv]


def launcher(programs: tuple[str, str], bwrap_argv: list[str], *,
             private: bool = False) -> list[str]:
    """bwrap's argv (whose command is `gated`), run on a network of its own; `private`:
    whether private networks answer there."""
    return [os.path.realpath(sys.executable), "-I", "-S", "-c", LAUNCHER, *programs,
            ",".join(prohibited(private)), *bwrap_argv]


PROGRAMS = ("slirp4netns", "ip")


def check_own_network(found: Sequence[str],
                      probe: Callable[[tuple[str, str]], list[str]] | None = None
                      ) -> OwnNetwork:
    """Given where PROGRAMS were found (a bare name: nowhere), whether they are all there,
    and, given a way to build a sandbox's argv on them (`probe`: one that runs `true`), one
    that starts."""
    missing = [name for name in found if not os.path.isabs(name)]
    if missing:
        return OwnNetwork(None, f"{', '.join(missing)} not installed (Debian: apt-get "
                                "install slirp4netns); a sandbox with a network shares the "
                                "host's, its loopback services included")
    programs = (found[0], found[1])
    if probe is not None:
        try:
            proc = subprocess.run(probe(programs), capture_output=True,
                                  text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return OwnNetwork(None, f"a sandbox's own network does not start ({exc}); a "
                                    "sandbox with a network shares the host's")
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            return OwnNetwork(None, f"a sandbox's own network does not start ({detail}); a "
                                    "sandbox with a network shares the host's")
    return OwnNetwork(programs, "a network of its own (slirp4netns): other hosts, not this "
                                "host's own services, link-local addresses or (unless [web] "
                                "allow_private) private networks")


# slirp4netns's resolver inside the namespace: it asks the host's resolver, from the host's
# side, so a resolver the namespace cannot reach itself still answers.
SLIRP_RESOLVER = "10.0.2.3"
HOST_RESOLV_CONF = Path("/etc/resolv.conf")
_resolvers: dict[tuple[int, int, int, bool], tuple[Path, Path] | None] = {}


def resolver_bind(host_conf: Path = HOST_RESOLV_CONF, *,
                  private: bool = False) -> tuple[Path, Path] | None:
    """(file, where in the sandbox) of the resolv.conf a sandbox on its own network reads,
    when the host's names a resolver unreachable from there: on loopback (systemd-resolved's
    127.0.0.53, a local dnsmasq), link-local (a cloud's, beside its metadata service), IPv6
    (the namespace has none), one of the host's own addresses, or, unless `private`
    networks answer there, a private one (a home router's, a cloud network's). None when
    the host's serves as it is, or there is none. Made once per version of the host's file."""
    try:
        where = Path(os.path.realpath(host_conf))
        found = os.stat(where)
    except OSError:
        return None
    key = (found.st_ino, found.st_mtime_ns, found.st_size, private)
    made = _resolvers.get(key)
    if key not in _resolvers or (made is not None and not made[0].is_file()):  # tmp cleaned
        try:
            text = where.read_text(errors="replace")
        except OSError:
            return None
        lines = text.splitlines()
        servers = [line.split()[1] for line in lines if line.split()[:1] == ["nameserver"]
                   and len(line.split()) > 1]
        unreachable = [s for s in servers
                       if not _reachable(s, _host_addresses(), private=private)]
        _resolvers[key] = (_conf_file(lines), where) if unreachable else None
    return _resolvers[key]


def _reachable(server: str, own: frozenset[str], *, private: bool) -> bool:
    """Whether the namespace reaches this resolver through the NAT as any other host."""
    try:
        address = ipaddress.ip_address(server.split("%")[0])
    except ValueError:
        return False
    if address.version != 4 or address.is_loopback or address.is_link_local or \
            address.is_unspecified or server in own:
        return False
    return private or not any(address in net for net in _PRIVATE_NETS)


def _host_addresses() -> frozenset[str]:
    """The host's own IPv4 addresses, as the kernel's routing trie lists them (the launcher
    prohibits them inside)."""
    found, last = set(), ""
    try:
        with open("/proc/net/fib_trie") as trie:
            for line in trie:
                if "|--" in line:
                    last = line.split()[-1]
                elif "/32 host LOCAL" in line:
                    found.add(last)
    except OSError:
        pass
    return frozenset(found)


def _conf_file(host_lines: list[str]) -> Path:
    """The sandbox's resolv.conf: slirp4netns's resolver, with the host's search domains
    and options. Kept in a folder of this user's own under the temporary folder, named by
    its content (so any number of processes share it and none leaves one of its own)."""
    kept = [line for line in host_lines if line.split()[:1] in (["search"], ["domain"],
                                                                ["options"])]
    text = "\n".join([f"nameserver {SLIRP_RESOLVER}", *kept]) + "\n"
    folder = _own_folder(Path(tempfile.gettempdir()) / f"kanban-resolv-{os.geteuid()}")
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.conf"
    if not path.is_file() or path.read_text() != text:
        # 0o644: read in the sandbox, whatever user it runs commands as
        replace_file(path, text.encode(), mode=0o644)
    return path


def _own_folder(path: Path) -> Path:
    """`path`, a folder only this user can write to; a fresh one of its own where someone
    else made `path` first (in a shared /tmp, a planted resolv.conf would steer names)."""
    with suppress(FileExistsError):
        path.mkdir(mode=0o755)
    found = os.lstat(path)
    if stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid() and \
            not found.st_mode & 0o022:
        return path
    return Path(tempfile.mkdtemp(prefix="kanban-resolv-"))


__all__ = ["LAUNCHER", "PROGRAMS", "PROHIBITED", "SLIRP_RESOLVER", "OwnNetwork",
           "check_own_network", "gated", "launcher", "resolver_bind"]
