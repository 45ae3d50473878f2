"""The end of a worktree workspace: merged or not, removed at its own path only, branch kept
(issue 29, item 9)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kanban.tools import worktree
from kanban.tools.worktree_lifecycle import branch_state, remove_checkout, require_repository
from kanban.workspaces import Workspace


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def repo_with_board(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README").write_text("hi\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start", cwd=repo)
    home = repo / ".kanban"
    home.mkdir()
    return repo, home


def checked_out(home: Path, card_id: int, change: str | None = None) -> Workspace:
    ws = Workspace(card_id, "worktree", home / "workspaces" / "default" / str(card_id),
                   f"kanban/{card_id}")
    ws = worktree.prepare(ws, home)
    if change is not None:
        (ws.path / change).write_text("new\n")
        worktree.finish(ws, f"kanban #{card_id}")
    return ws


def worktrees(repo: Path) -> list[str]:
    return [line.removeprefix("worktree ") for line in
            git("worktree", "list", "--porcelain", cwd=repo).splitlines()
            if line.startswith("worktree ")]


def test_merged_or_not_against_the_current_branch(tmp_path: Path) -> None:
    repo, home = repo_with_board(tmp_path)
    assert not branch_state(home, "kanban/9").exists
    ws = checked_out(home, 7, change="feature.txt")
    state = branch_state(home, "kanban/7")
    assert (state.exists, state.merged, state.ahead, state.into) == (True, False, 1, "main")
    assert state.describe() == "branch kanban/7: not merged into main (1 commit ahead)"
    git("-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--no-edit", "kanban/7",
        cwd=repo)
    assert branch_state(home, "kanban/7").merged
    assert ws.path.exists()


def test_remove_takes_the_checkout_and_keeps_the_branch(tmp_path: Path) -> None:
    repo, home = repo_with_board(tmp_path)
    ws = checked_out(home, 7, change="feature.txt")
    (ws.path / "uncommitted.txt").write_text("dirty\n")
    assert str(ws.path) in worktrees(repo)
    assert remove_checkout(home, ws.path)
    assert not ws.path.exists() and str(ws.path) not in worktrees(repo)
    assert git("show", "kanban/7:feature.txt", cwd=repo) == "new"
    assert not remove_checkout(home, ws.path)  # already gone


def test_a_path_outside_the_boards_workspaces_is_refused(tmp_path: Path) -> None:
    repo, home = repo_with_board(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(worktree.WorktreeError, match="not a card's workspace"):
        remove_checkout(home, elsewhere)
    with pytest.raises(worktree.WorktreeError, match="not a card's workspace"):
        remove_checkout(home, home / "workspaces" / "default" / ".." / ".." / ".." / "README")
    assert (repo / "README").exists() and elsewhere.exists()


def test_a_forged_git_file_does_not_make_a_scratch_dir_a_worktree(tmp_path: Path) -> None:
    """A model writes `.git` into its scratch workspace, pointing at the repository's own
    git dir: removal asks the board's repository, which lists no such worktree."""
    repo, home = repo_with_board(tmp_path)
    scratch = home / "workspaces" / "default" / "3"
    scratch.mkdir(parents=True)
    (scratch / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    with pytest.raises(worktree.WorktreeError, match="not a worktree of"):
        remove_checkout(home, scratch)
    assert (scratch / ".git").exists() and (repo / "README").exists()


def test_a_checkout_whose_git_file_was_rewritten_is_removed_inside_only(tmp_path: Path) -> None:
    """The model points its worktree's `.git` at the main repository and plants a symlink to
    a file outside: the checkout goes, the symlink's target and the repository stay."""
    repo, home = repo_with_board(tmp_path)
    ws = checked_out(home, 5)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (ws.path / "link").symlink_to(victim)
    (ws.path / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    assert remove_checkout(home, ws.path)
    assert not ws.path.exists() and str(ws.path) not in worktrees(repo)
    assert victim.read_text() == "keep me\n"
    # the repository's own files untouched (the board's folder keeps the branch's record)
    assert (repo / "README").exists()
    assert git("status", "--porcelain", "--", ".", ":!.kanban", cwd=repo) == ""


def test_adding_needs_a_repository(tmp_path: Path) -> None:
    with pytest.raises(worktree.WorktreeError, match="inside a git repository"):
        require_repository(tmp_path)
