"""A sandbox's own network: the launcher passes the command's fate on, leaves nothing
running, and never runs the command on a network that did not come up."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from kanban.tools.hostview import own_interpreter
from kanban.tools.netns import PROGRAMS, check_own_network, gated, launcher, resolver_bind
from kanban.tools.runner import CommandSpec, PlainRunner
from kanban.tools.sandbox import SandboxPolicy, trusted_program
from kanban.tools.sandbox_runner import BwrapRunner
from tests.support.procs import wait_until
from tests.support.sandbox import require_own_network


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    require_own_network()
    path = tmp_path / "ws"
    path.mkdir()
    return path


def run(workspace: Path, command: str, *, session: bool = False, timeout_s: float = 20.0,
        own_network: bool = True) -> tuple[int | None, str, bool]:
    policy = SandboxPolicy(writable=(workspace,), readable=own_interpreter(),
                           own_network=own_network)
    box = BwrapRunner(policy, PlainRunner(), session=session)
    out = workspace.parent / "out.txt"
    try:
        result = box.run(CommandSpec.shell(command, cwd=workspace,
                                           env={"PATH": os.environ["PATH"]}, output_path=out,
                                           timeout_s=timeout_s))
    finally:
        box.close()
    return result.exit_code, out.read_text(), result.timed_out


def slirps() -> set[int]:
    found = set()
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and Path(f"/proc/{name}/comm").read_text().strip() == "slirp4netns":
                found.add(int(name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("session", [False, True])
def test_the_commands_exit_code_and_output_pass_through(workspace: Path,
                                                        session: bool) -> None:
    code, text, _ = run(workspace, "ip -o -4 addr show tap0 | grep -c 10.0.2.100; exit 3",
                        session=session)
    assert (code, text) == (3, "1\n")


def test_the_host_network_when_the_profile_reaches_the_host(workspace: Path) -> None:
    code, text, _ = run(workspace, "ip -o link | grep -c tap0", own_network=False)
    assert (code, text) == (1, "0\n")  # no tap0: the host's own links


def test_a_timeout_ends_the_command_and_its_nat(workspace: Path) -> None:
    before = slirps()
    code, _, timed_out = run(workspace, "sleep 60", timeout_s=1.0)
    assert timed_out and code is None
    wait_until(lambda: not (slirps() - before), timeout=10, what="no slirp4netns left")


def test_a_signal_that_ends_the_command_is_passed_on(workspace: Path) -> None:
    """As bwrap alone says it (128 + the signal's number)."""
    code, _, _ = run(workspace, "kill -TERM $$")
    assert code == 128 + signal.SIGTERM
    assert run(workspace, "kill -TERM $$", own_network=False)[0] == code


def test_a_nat_that_does_not_start_stops_the_command_from_running(
        workspace: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "slirp4netns").write_text("#!/bin/sh\necho 'no /dev/net/tun' >&2\nexit 1\n")
    (fake / "slirp4netns").chmod(0o755)
    (fake / "ip").symlink_to(trusted_program("ip"))
    marker = workspace / "ran"
    policy = SandboxPolicy(writable=(workspace,), readable=own_interpreter())
    programs = (str(fake / "slirp4netns"), str(fake / "ip"))

    wrapped = policy.wrap(["sh", "-c", f"touch {marker}"], workspace)
    plain = SandboxPolicy(writable=(workspace,), readable=own_interpreter(),
                          own_network=False).wrap(gated(["sh", "-c", f"touch {marker}"]),
                                                  workspace)
    assert wrapped[4:7] == launcher(programs, [])[:3]  # the policy takes its own network
    proc = subprocess.run([*plain[:4], *launcher(programs, plain[4:])], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 126 and not marker.exists()
    assert "the sandbox's own network did not start: slirp4netns ended" in proc.stderr


def test_without_slirp4netns_the_host_network_is_said(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    own = check_own_network([trusted_program(name) for name in PROGRAMS])
    assert not own.available
    assert own.reason.startswith("slirp4netns, ip not installed"), own.reason
    assert "shares the host's, its loopback services included" in own.reason


def test_descriptors_passed_through_reach_the_command_whatever_their_numbers(
        workspace: Path, tmp_path: Path) -> None:
    """A shared sandbox's socket is passed to its server at whatever number the worker had
    it: the launcher's own descriptors never land on one (a fixed 7 and 8 did, and the
    shared sandbox silently failed to start)."""
    note = tmp_path / "note.txt"
    note.write_text("passed\n")
    policy = SandboxPolicy(writable=(workspace,), readable=own_interpreter())
    argv = policy.wrap(["sh", "-c", "cat <&3; cat <&7; cat <&8"], workspace)
    opened = 'exec 3<"$0" 7<"$0" 8<"$0"; exec "$@"'
    proc = subprocess.run(["sh", "-c", opened, str(note), *argv], capture_output=True,
                          text=True, timeout=30)
    assert (proc.returncode, proc.stdout) == (0, "passed\n" * 3), proc.stderr


def test_a_shared_sandbox_runs_on_its_own_network(workspace: Path) -> None:
    box = BwrapRunner(SandboxPolicy(writable=(workspace,), readable=own_interpreter()),
                      PlainRunner())
    out = workspace.parent / "out.txt"
    try:
        for _ in range(2):
            result = box.run(CommandSpec.shell("ip -o -4 addr show tap0 | grep -c 10.0.2.100",
                                               cwd=workspace, output_path=out, timeout_s=20.0,
                                               env={"PATH": os.environ["PATH"]}))
            assert (result.exit_code, out.read_text()) == (0, "1\n")
            session = box._session
            assert session is not None and not session.dead  # the shared one ran it
    finally:
        box.close()


@pytest.mark.parametrize(("servers", "rewritten"), [
    (["198.51.100.53"], False),  # another host's: reached through the NAT
    (["198.51.100.53", "127.0.0.53"], True),  # systemd-resolved's stub
    (["169.254.169.254"], True),  # a cloud's (GCE's metadata server answers names)
    (["2001:db8::53"], True),  # the namespace has no IPv6
    (["fe80::1%eth0"], True),
    (["not-an-address"], True),
    ([], False)])
def test_a_resolver_the_sandbox_cannot_reach_is_replaced(tmp_path: Path, servers: list[str],
                                                          rewritten: bool) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("".join(f"nameserver {s}\n" for s in servers)
                    + "search corp.example\noptions edns0\n# a comment\n")
    bind = resolver_bind(conf)
    if not rewritten:
        assert bind is None
        return
    assert bind is not None
    made, where = bind
    assert where == conf
    assert made.read_text() == "nameserver 10.0.2.3\nsearch corp.example\noptions edns0\n"
    assert made.stat().st_mode & 0o777 == 0o644
    assert resolver_bind(conf) == bind  # made once per version of the host's file


@pytest.mark.parametrize("server", ["192.168.1.1", "10.0.0.2", "172.31.0.2", "100.100.100.100"])
def test_a_private_resolver_is_replaced_while_private_networks_are_refused(
        tmp_path: Path, server: str) -> None:
    """A home router's resolver, a cloud network's (AWS's VPC resolver), Tailscale's: the
    sandbox's routes prohibit them unless `[web] allow_private`, so slirp4netns's asks."""
    conf = tmp_path / "resolv.conf"
    conf.write_text(f"nameserver {server}\n")
    bind = resolver_bind(conf)
    assert bind is not None and bind[0].read_text() == "nameserver 10.0.2.3\n"
    assert resolver_bind(conf, private=True) is None


def test_private_networks_are_prohibited_unless_allowed() -> None:
    argv = launcher(("/usr/bin/slirp4netns", "/usr/sbin/ip"), ["bwrap", "--", "true"])
    shut = argv[argv.index("/usr/sbin/ip") + 1].split(",")
    assert set(shut) == {"169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                         "100.64.0.0/10"}
    argv = launcher(("/usr/bin/slirp4netns", "/usr/sbin/ip"), ["bwrap", "--", "true"],
                    private=True)
    assert argv[argv.index("/usr/sbin/ip") + 1] == "169.254.0.0/16"  # link-local, always


def test_the_resolver_file_goes_where_resolv_conf_leads(tmp_path: Path) -> None:
    """/etc/resolv.conf as a link to systemd's stub under /run: bound over the stub (which
    the system view binds), not over the link."""
    stub = tmp_path / "run" / "stub-resolv.conf"
    stub.parent.mkdir()
    stub.write_text("nameserver 127.0.0.53\n")
    link = tmp_path / "resolv.conf"
    link.symlink_to(stub)
    bind = resolver_bind(link)
    assert bind is not None and bind[1] == stub


def test_a_folder_someone_else_made_for_the_file_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a shared /tmp another user may make kanban-resolv-UID first, to plant a resolver
    that steers every sandbox's names: a folder not ours, or writable by others, is left."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"kanban-resolv-{os.geteuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.0.0.53\n")
    bind = resolver_bind(conf)
    assert bind is not None and bind[0].parent != planted
    assert bind[0].parent.parent == tmp_path and not list(planted.iterdir())


def test_a_resolver_file_removed_meanwhile_is_made_again(tmp_path: Path) -> None:
    """A cleaner of the temporary folder took it: bwrap would not start without it."""
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.0.0.53\n")
    bind = resolver_bind(conf)
    assert bind is not None
    bind[0].unlink()
    again = resolver_bind(conf)
    assert again is not None and again[0].is_file()
