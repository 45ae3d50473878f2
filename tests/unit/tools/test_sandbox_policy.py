"""The bubblewrap policy as arguments: a minimal system view, parents mounted before
children, read-only over writable, the card's own HOME, a profile's grants, network per
flag, and the git wall it is given."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kanban.state.config import Profile
from kanban.state.errors import ConfigError
from kanban.tools import gitwall
from kanban.tools.gitwall import Wall, card_wall
from kanban.tools.hostview import (
    EtcSecrets,
    SystemView,
    etc_secrets,
    own_interpreter,
    program_places,
    resolver_targets,
)
from kanban.tools.sandbox import SandboxPolicy, sizes_tmpfs
from kanban.worker.sandboxing import card_policy
from kanban.workspaces import GitPaths
from tests.support.pg import skip_or_fail

MERGED = SystemView(binds=(Path("/usr"), Path("/opt"), Path("/etc")),
                    links=(("usr/bin", Path("/bin")), ("usr/lib", Path("/lib"))),
                    hidden_files=(Path("/etc/shadow"),), hidden_dirs=(Path("/etc/ssl/private"),))
BARE = SystemView(binds=(), links=(), hidden_files=(), hidden_dirs=())


SHM = [("--tmpfs", "/dev/shm")]
DEV = [("--remount-ro", "/dev")]


def mounts(argv: list[str]) -> list[tuple[str, str]]:
    out = []
    for i, arg in enumerate(argv):
        if arg in ("--tmpfs", "--bind", "--remount-ro", "--ro-bind"):
            out.append((arg, argv[i + 1]))
    return out


def test_the_board_folder_is_hidden_before_the_workspace_inside_it_is_bound() -> None:
    home = Path("/srv/project/.kanban")
    workspace = home / "workspaces" / "default" / "7"
    argv = SandboxPolicy(writable=(workspace,), hidden=(home,), network=False,
                         system=BARE).wrap(["bash", "-c", "ls"], workspace)
    assert mounts(argv) == [("--tmpfs", "/tmp"), ("--tmpfs", str(home)),
                            ("--bind", str(workspace)), *SHM, ("--remount-ro", str(home)),
                            *DEV]
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--unshare-ipc" in argv
    assert argv[argv.index("--chdir") + 1] == str(workspace)
    assert argv[-4:] == ["--", "bash", "-c", "ls"]


def test_a_network_profile_keeps_the_hosts_network() -> None:
    argv = SandboxPolicy(writable=(Path("/w"),), network=True, system=BARE).wrap(
        ["true"], Path("/w"))
    assert "--unshare-net" not in argv and ("--bind", "/w") in mounts(argv)


def test_read_only_paths_are_bound_over_the_writable_folders_that_hold_them() -> None:
    common, workspace = Path("/srv/repo/.git"), Path("/srv/repo/.kanban/ws/7")
    objects, admin = common / "objects", common / "worktrees" / "7"
    argv = SandboxPolicy(writable=(workspace, objects, admin),
                         readonly=(common, admin / "gitdir", workspace / ".bashrc"),
                         network=False, system=BARE).wrap(["true"], workspace)
    assert mounts(argv) == [
        ("--tmpfs", "/tmp"), ("--ro-bind", str(common)), ("--bind", str(objects)),
        ("--bind", str(workspace)), ("--bind", str(admin)),
        ("--ro-bind", str(admin / "gitdir")), ("--ro-bind", str(workspace / ".bashrc")),
        *SHM, *DEV]


def test_at_the_same_path_read_only_wins() -> None:
    argv = SandboxPolicy(writable=(Path("/w"),), readonly=(Path("/w"),), network=False,
                         system=BARE).wrap(["true"], Path("/w"))
    assert mounts(argv) == [("--tmpfs", "/tmp"), ("--bind", "/w"), ("--ro-bind", "/w"), *SHM,
                            *DEV]


def test_memory_backed_folders_are_bounded_and_dev_is_read_only() -> None:
    """/tmp holds at most tmp_bytes, /dev/shm at most 64 MiB, /dev no file at all."""
    argv = SandboxPolicy(writable=(Path("/w"),), tmp_bytes=10 << 20, system=BARE).wrap(
        ["true"], Path("/w"))
    if not sizes_tmpfs("bwrap"):
        skip_or_fail("this bwrap cannot size a tmpfs (--size came in 0.7)")
    tmp, shm = argv.index("/tmp"), argv.index("/dev/shm")
    assert argv[tmp - 3:tmp] == ["--size", str(10 << 20), "--tmpfs"], argv
    assert argv[shm - 3:shm] == ["--size", str(10 << 20), "--tmpfs"], argv
    assert argv.index("/dev/shm") > argv.index("/dev")  # mounted on the fresh /dev
    big = SandboxPolicy(writable=(Path("/w"),), tmp_bytes=1 << 40, system=BARE).wrap(
        ["true"], Path("/w"))
    assert big[big.index("/dev/shm") - 2] == str(64 << 20)
    assert mounts(argv)[-1] == ("--remount-ro", "/dev")


def test_a_worktree_card_writes_objects_its_admin_folder_and_its_own_branch_only(
        tmp_path: Path) -> None:
    common = tmp_path / "repo" / ".git"
    admin = common / "worktrees" / "7"
    for folder in ("objects", "refs/heads/kanban/group", "logs/refs/heads/kanban", "hooks"):
        (common / folder).mkdir(parents=True)
    for ref in ("refs/heads/kanban/7", "refs/heads/kanban/8", "logs/refs/heads/kanban/7",
                "logs/refs/heads/kanban/8"):
        (common / ref).write_text("x")
    (common / "refs/heads/kanban/9").symlink_to(common / "refs/heads/kanban/8")  # not bound
    admin.mkdir(parents=True)
    for name in ("gitdir", "commondir", "config.worktree", "HEAD", "index"):
        (admin / name).write_text("x")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").write_text(f"gitdir: {tmp_path}/victim/worktrees/x\n")  # planted
    wall = card_wall(workspace, GitPaths(admin, common, "0" * 40), "kanban/7")
    kanban = common / "refs" / "heads" / "kanban"
    assert wall.writable == (workspace, common / "objects", admin, kanban,
                             common / "logs" / "refs" / "heads" / "kanban" / "7")
    assert wall.readonly == (common, admin / "gitdir", admin / "commondir",
                             admin / "config.worktree", kanban / "8", kanban / "group",
                             workspace / ".git")
    assert not any("victim" in str(p) for p in (*wall.writable, *wall.readonly))


def test_a_writable_checkout_keeps_its_git_folder_and_shell_start_up_files(
        tmp_path: Path) -> None:
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".bashrc").write_text("")
    (tmp_path / "dotfiles").write_text("")
    (tmp_path / ".profile").symlink_to(tmp_path / "dotfiles")  # not a file we can pin
    wall = card_wall(tmp_path)
    assert wall == Wall((tmp_path,), (tmp_path / ".bashrc", tmp_path / ".git"))
    assert card_wall(tmp_path / "none") == Wall((tmp_path / "none",), ())
    # a scratch folder is kanban's: a repository there is the model's own
    assert card_wall(tmp_path, scratch=True) == Wall((tmp_path,), ())


def test_repositories_nested_in_a_writable_folder_keep_their_git_folders(
        tmp_path: Path) -> None:
    deep = ("a/.git", "b/c/.git", "d/e/f/.git", "g/h/i/j/.git", "k/l/m/n/o/p/.git",
            "node_modules/q/.git", ".venv/src/r/.git", "build/vendor/s/.git", "a/t/.git")
    for nested in (*deep, "board/workspaces/1/.git", "a/.git/modules/u/.git"):
        (tmp_path / nested).mkdir(parents=True)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    (tmp_path / "elsewhere").symlink_to(tmp_path / "a")  # links are not followed
    wall = card_wall(tmp_path, hidden=(tmp_path / "board",))
    assert wall.readonly == tuple(sorted(tmp_path / p for p in (*deep, "sub/.git")))
    assert card_wall(tmp_path, scratch=True) == Wall((tmp_path,), ())


def test_a_tree_too_big_to_look_through_is_refused_not_left_half_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in range(5):
        (tmp_path / f"f{name}").write_text("")
    monkeypatch.setattr(gitwall, "NESTED_ENTRIES", 4)
    with pytest.raises(ConfigError, match=f"workspace {tmp_path} holds more than 4 files "
                                          r"and folders .* smaller folder .*\(dir:PATH\)"):
        card_wall(tmp_path)
    monkeypatch.setattr(gitwall, "NESTED_ENTRIES", 100)
    for name in ("a", "b", "c"):
        (tmp_path / name / ".git").mkdir(parents=True)
    monkeypatch.setattr(gitwall, "NESTED_MAX", 2)
    with pytest.raises(ConfigError, match="more than 2 git repositories"):
        card_wall(tmp_path)
    assert card_wall(tmp_path, scratch=True) == Wall((tmp_path,), ())  # never looked through


def test_the_host_is_not_bound_only_the_system_without_its_secrets() -> None:
    argv = SandboxPolicy(writable=(Path("/w"),), system=MERGED).wrap(["true"], Path("/w"))
    assert ("--ro-bind", "/") not in mounts(argv) and "/" not in argv[:argv.index("--")]
    assert mounts(argv)[:3] == [("--ro-bind", "/usr"), ("--ro-bind", "/opt"),
                                ("--ro-bind", "/etc")]
    assert argv[argv.index("--symlink"):argv.index("--symlink") + 3] == \
        ["--symlink", "usr/bin", "/bin"]
    shadow = argv.index("/etc/shadow")
    assert argv[shadow - 2:shadow + 1] == ["--ro-bind", "/dev/null", "/etc/shadow"]
    assert ("--tmpfs", "/etc/ssl/private") in mounts(argv)
    assert ("--remount-ro", "/etc/ssl/private") in mounts(argv)
    assert argv[argv.index("--proc") + 1] == "/proc" and argv[argv.index("--dev") + 1] == "/dev"
    for place in ("/root", "/home", "/run", "/var/run", "/var", "/sys"):
        assert place not in argv, place


def test_a_card_has_its_own_home_and_exactly_the_granted_paths() -> None:
    board = Path("/srv/.kanban")
    workspace, home = board / "workspaces" / "b" / "3", board / "homes" / "b" / "3"
    argv = SandboxPolicy(writable=(workspace, Path("/srv/out")), hidden=(board,),
                         home=home, readable=(Path("/data/ref"), Path("/tmp/venv")),
                         system=MERGED).wrap(["true"], workspace)
    order = mounts(argv)
    assert order.index(("--tmpfs", "/tmp")) < order.index(("--ro-bind", "/tmp/venv"))
    assert order.index(("--tmpfs", str(board))) < order.index(("--bind", str(home)))
    assert ("--ro-bind", "/data/ref") in order and ("--bind", "/srv/out") in order
    assert ("--bind", "/data/ref") not in order
    assert argv[argv.index("--setenv"):argv.index("--setenv") + 3] == ["--setenv", "HOME",
                                                                       str(home)]


def test_etc_secrets_are_the_named_ones_and_what_others_cannot_read(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    (etc / "ssl" / "private").mkdir(parents=True)
    for name, mode in [("passwd", 0o644), ("shadow", 0o640), ("sudoers", 0o644),
                       ("ssh/ssh_host_ed25519_key", 0o644), ("ssh/ssh_config", 0o644),
                       ("app.conf", 0o600), ("ssl/private/key.pem", 0o644)]:
        (etc / name).write_text("x")
        (etc / name).chmod(mode)
    (etc / "vault").mkdir(mode=0o750)
    (etc / "vault" / "token").write_text("x")
    files, dirs = etc_secrets(etc)
    assert sorted(p.relative_to(etc).as_posix() for p in files) == [
        "app.conf", "shadow", "ssh/ssh_host_ed25519_key", "sudoers"]
    assert sorted(p.relative_to(etc).as_posix() for p in dirs) == ["ssl/private", "vault"]


def test_a_venv_python_brings_its_venv_and_its_base_installation(tmp_path: Path) -> None:
    base = tmp_path / "pythons" / "3.11" / "bin"
    base.mkdir(parents=True)
    (base / "python3.11").write_text("")
    venv = tmp_path / "checkout" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(base / "python3.11")
    (venv / "pyvenv.cfg").write_text(f"home = {base}\ninclude-system-site-packages = false\n")
    script = tmp_path / "checkout" / "server.py"
    script.write_text("")
    places = program_places(str(venv / "bin" / "python"), [str(script), "-v"], None)
    assert set(places) == {venv, base.parent, script}


def test_a_cards_policy_binds_its_grants_its_python_and_refuses_a_link_into_the_board(
        tmp_path: Path) -> None:
    board = tmp_path / "board"
    workspace = board / "workspaces" / "default" / "1"
    workspace.mkdir(parents=True)
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    profile = Profile(name="p", sandbox_read=(str(data), str(tmp_path / "missing")),
                      sandbox_write=(str(out),))
    policy = card_policy(profile, network=False, workspace=workspace, home=board,
                         card_home=board / "homes" / "default" / "1")
    assert policy.hidden == (board.resolve(),) and policy.network is False
    assert data in policy.readable and tmp_path / "missing" not in policy.readable
    assert set(own_interpreter()) <= set(policy.readable)
    assert policy.writable == (workspace, out)
    link = tmp_path / "sneaky"
    link.symlink_to(board)
    with pytest.raises(ConfigError, match="lies in the board's folder"):
        card_policy(replace(profile, sandbox_read=(str(link),)), network=True,
                    workspace=workspace, home=board, card_home=None)


def test_a_resolv_conf_linked_into_run_brings_that_one_file(tmp_path: Path) -> None:
    stub = tmp_path / "run" / "systemd" / "resolve" / "stub-resolv.conf"
    stub.parent.mkdir(parents=True)
    stub.write_text("nameserver 127.0.0.53\n")
    link = tmp_path / "resolv.conf"
    link.symlink_to(stub)
    assert resolver_targets(link) == [stub]
    plain = tmp_path / "plain.conf"
    plain.write_text("nameserver 10.0.0.1\n")
    assert resolver_targets(plain) == []


def test_etc_secrets_follow_etc_as_it_changes(tmp_path: Path) -> None:
    """A secret written or removed is seen at the next call (its folder's mtime moved); a
    mode changed in place, which moves no folder's, by the next walk at the latest."""
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    (etc / "app.conf").write_text("x")
    settle(etc, etc / "ssh", age_s=3600)
    now = [0.0]
    watch = EtcSecrets(etc, recheck_s=10.0, clock=lambda: now[0])
    assert watch.current() == ((), ())
    key = etc / "ssh" / "ssh_host_rsa_key"
    key.write_text("x")
    key.chmod(0o644)
    settle(etc / "ssh", age_s=3500)
    assert watch.current() == ((key,), ())
    key.unlink()
    settle(etc / "ssh", age_s=3400)
    assert watch.current() == ((), ())
    (etc / "app.conf").chmod(0o600)
    assert watch.current() == ((), ())  # no folder moved: not seen before the next walk
    now[0] += 10.0
    assert watch.current() == ((etc / "app.conf",), ())


def test_a_change_within_the_same_tick_of_the_clock_is_seen(tmp_path: Path) -> None:
    """A folder changed just before it was read may change again without its mtime moving
    (the filesystem's clock is coarse): until it has been still a while, it is read again."""
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    watch = EtcSecrets(etc, recheck_s=3600.0)
    assert watch.current() == ((), ())
    stamp = (etc / "ssh").stat().st_mtime_ns  # recent: it was made just now
    key = etc / "ssh" / "ssh_host_rsa_key"
    key.write_text("x")
    os.utime(etc / "ssh", ns=(stamp, stamp))  # the change did not move it
    assert watch.current() == ((key,), ())


def settle(*folders: Path, age_s: float) -> None:
    """Give folders an mtime `age_s` in the past: changed long before they are read."""
    stamp = time.time_ns() - int(age_s * 1e9)
    for folder in folders:
        os.utime(folder, ns=(stamp, stamp))
