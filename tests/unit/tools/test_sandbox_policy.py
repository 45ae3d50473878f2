"""The bubblewrap policy as arguments (parents mounted before children, read-only over
writable, network per flag) and the git wall it is given."""

from __future__ import annotations

from pathlib import Path

from kanban.tools.gitwall import Wall, card_wall
from kanban.tools.sandbox import SandboxPolicy
from kanban.workspaces import GitPaths


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


def test_a_worktree_card_writes_objects_its_admin_folder_and_kanban_branches_only(
        tmp_path: Path) -> None:
    common = tmp_path / "repo" / ".git"
    admin = common / "worktrees" / "7"
    for folder in ("objects", "refs/heads/kanban", "logs/refs/heads/kanban", "hooks"):
        (common / folder).mkdir(parents=True)
    admin.mkdir(parents=True)
    for name in ("gitdir", "commondir", "config.worktree", "HEAD", "index"):
        (admin / name).write_text("x")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".git").write_text(f"gitdir: {tmp_path}/victim/worktrees/x\n")  # planted
    wall = card_wall(workspace, GitPaths(admin, common, "0" * 40), "kanban/7")
    assert wall.writable == (workspace, common / "objects", admin,
                             common / "refs" / "heads" / "kanban",
                             common / "logs" / "refs" / "heads" / "kanban")
    assert wall.readonly == (common, admin / "gitdir", admin / "commondir",
                             admin / "config.worktree", workspace / ".git")
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
