"""The bubblewrap policy as arguments: parents mounted before children, network per flag."""

from __future__ import annotations

from pathlib import Path

from kanban.tools.sandbox import SandboxPolicy, git_common_dir


def mounts(argv: list[str]) -> list[tuple[str, str]]:
    out = []
    for i, arg in enumerate(argv):
        if arg in ("--tmpfs", "--bind", "--remount-ro"):
            out.append((arg, argv[i + 1]))
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


def test_a_git_worktree_shares_its_repositorys_git_folder(tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    worktree.mkdir()
    assert git_common_dir(worktree) is None
    (worktree / ".git").write_text(f"gitdir: {tmp_path}/repo/.git/worktrees/wt\n")
    assert git_common_dir(worktree) == tmp_path / "repo" / ".git"
