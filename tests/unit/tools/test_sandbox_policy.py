"""The bubblewrap policy as arguments: parents mounted before children, network per flag."""

from __future__ import annotations

from pathlib import Path

from kanban.tools.sandbox import SandboxPolicy


def mounts(argv: list[str]) -> list[tuple[str, str]]:
    out = []
    for i, arg in enumerate(argv):
        if arg in ("--tmpfs", "--bind", "--ro-bind", "--remount-ro") and argv[i + 1] != "/":
            out.append((arg, argv[i + 1]))  # (the system view aside)
    return out


def test_the_board_folder_is_hidden_before_the_workspace_inside_it_is_bound() -> None:
    home = Path("/srv/project/.kanban")
    workspace = home / "workspaces" / "default" / "7"
    argv = SandboxPolicy(writable=(workspace,), hidden=(home,), network=False).wrap(
        ["bash", "-c", "ls"], workspace)
    assert mounts(argv) == [("--tmpfs", "/tmp"), ("--tmpfs", str(home)),
                            ("--bind", str(workspace)), ("--remount-ro", str(home))]
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--unshare-ipc" in argv
    assert argv[argv.index("--chdir") + 1] == str(workspace)
    assert argv[-4:] == ["--", "bash", "-c", "ls"]


def test_a_network_profile_keeps_the_hosts_network() -> None:
    argv = SandboxPolicy(writable=(Path("/w"),), network=True).wrap(["true"], Path("/w"))
    assert "--unshare-net" not in argv and ("--bind", "/w") in mounts(argv)


def test_read_only_paths_are_bound_over_the_writable_folders_that_hold_them() -> None:
    common, workspace = Path("/srv/repo/.git"), Path("/srv/repo/.kanban/ws/7")
    objects, admin = common / "objects", common / "worktrees" / "7"
    argv = SandboxPolicy(writable=(workspace, objects, admin),
                         readonly=(common, admin / "gitdir", workspace / ".bashrc")
                         ).wrap(["true"], workspace)
    assert mounts(argv) == [
        ("--tmpfs", "/tmp"), ("--ro-bind", str(common)), ("--bind", str(objects)),
        ("--bind", str(workspace)), ("--bind", str(admin)),
        ("--ro-bind", str(admin / "gitdir")), ("--ro-bind", str(workspace / ".bashrc"))]


def test_at_the_same_path_read_only_wins() -> None:
    argv = SandboxPolicy(writable=(Path("/w"),), readonly=(Path("/w"),)).wrap(["true"],
                                                                              Path("/w"))
    assert mounts(argv) == [("--tmpfs", "/tmp"), ("--bind", "/w"), ("--ro-bind", "/w")]
