"""The end of a `worktree` workspace: whether its branch is merged, and removing its checkout.

The repository is always the one holding the board's folder (`repository_of(home)`), never
whatever the model-writable checkout says it belongs to. A checkout is removed only at the
path kanban gave it, `workspaces/<board>/<card>/` under the board's folder, and only when the
repository lists it as one of its worktrees; the branch `kanban/<card>` is kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kanban.tools.gitsafe import Git, GitError
from kanban.tools.worktree import (
    RECORDS,
    WorktreeError,
    repository_of,
    write_record,
)
from kanban.tools.worktree_refs import branch_mirror, branch_tip
from kanban.workspaces import WORKTREE, GitPaths, Workspace


@dataclass(frozen=True)
class BranchState:
    """A card's branch against the repository's current branch."""

    branch: str
    exists: bool
    into: str  # the repository's current branch ("HEAD" when detached)
    merged: bool = False  # every commit of the branch is in `into`
    ahead: int = 0  # commits on the branch that `into` lacks

    def to_json(self) -> dict[str, object]:
        return {"branch": self.branch, "exists": self.exists, "into": self.into,
                "merged": self.merged, "ahead": self.ahead}

    def describe(self) -> str:
        if not self.exists:
            return f"branch {self.branch}: not made yet (the card has not run)"
        if self.merged:
            return f"branch {self.branch}: merged into {self.into}"
        return (f"branch {self.branch}: not merged into {self.into} "
                f"({self.ahead} commit{'s' if self.ahead != 1 else ''} ahead)")


def require_repository(home: Path) -> Path:
    """The repository a worktree card of this board would branch from (WorktreeError when
    the board's folder is in none): checked when the card is added, not when it is claimed."""
    return repository_of(home).cwd


def branch_state(home: Path, branch: str) -> BranchState:
    git = repository_of(home)
    current = _run(git, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    into = current.stdout.strip() if current.returncode == 0 else "HEAD"
    ref = f"refs/heads/{branch}"
    if _run(git, "rev-parse", "--verify", "--quiet", ref, check=False).returncode != 0:
        return BranchState(branch, False, into)
    merged = _run(git, "merge-base", "--is-ancestor", ref, "HEAD",
                  check=False).returncode == 0
    ahead = int(_run(git, "rev-list", "--count", f"HEAD..{ref}").stdout.strip() or 0)
    return BranchState(branch, True, into, merged, ahead)


def own_checkout(ws: Workspace, card_id: int) -> bool:
    """Whether `ws` is a worktree checked out for this card itself (not its parent's)."""
    return ws.kind == WORKTREE and ws.card_id == card_id


def remove_checkout(home: Path, path: Path) -> bool:
    """Remove the worktree checked out at `path` (under the board's workspaces folder) from
    the board's repository, deleting its files, and the dispatcher's record of it; its
    branch stays. False: nothing there."""
    path = _inside_workspaces(home, path)
    git = repository_of(home)
    # What stays is the branch and where it points, so a card opened again later checks
    # out its own branch, not one planted in its name meanwhile (tools/worktree.py).
    record = home / RECORDS / path.parent.name / f"{path.name}.json"
    tip = branch_tip(git, f"kanban/{path.name}") if path.name.isdigit() else None
    if tip is None:
        record.unlink(missing_ok=True)
    else:
        write_record(record, {"path": str(path), "tip": tip, "removed": True})
    if path.name.isdigit() and git.common_dir is not None:  # its sandbox's own refs folder
        paths = GitPaths(git.common_dir / "worktrees" / path.name, git.common_dir, "")
        mirror = branch_mirror(home, paths, f"kanban/{path.name}")
        if mirror is not None and mirror.folder.is_dir() and not mirror.folder.is_symlink():
            shutil.rmtree(mirror.folder)
        if mirror is not None:
            mirror.folder.with_name(f"{mirror.folder.name}.last").unlink(missing_ok=True)
    if not path.exists():
        _run(git, "worktree", "prune", check=False)
        return False
    if not _registered(git, path):
        raise WorktreeError(f"{path} is not a worktree of {git.cwd}; left as it is")
    removed = _run(git, "worktree", "remove", "--force", str(path), check=False)
    if removed.returncode != 0 and path.is_dir() and not path.is_symlink():
        # git refuses a checkout whose .git file was changed: the path is ours, so its files
        # go (rmtree follows no symlink), and git forgets the worktree.
        shutil.rmtree(path)
        _run(git, "worktree", "prune", check=False)
    return True


def _inside_workspaces(home: Path, path: Path) -> Path:
    """`path` as a real directory entry strictly inside `<home>/workspaces/<board>/`."""
    root = Path(os.path.realpath(home / "workspaces"))
    parent = Path(os.path.realpath(path.parent))
    if parent.parent != root or path.name in ("", ".", "..") or path.is_symlink():
        raise WorktreeError(f"refusing to remove {path}: not a card's workspace under {root}")
    return parent / path.name


def _registered(git: Git, path: Path) -> bool:
    listed = _run(git, "worktree", "list", "--porcelain").stdout.splitlines()
    paths = {line.removeprefix("worktree ") for line in listed if line.startswith("worktree ")}
    return str(path) in {os.path.realpath(p) for p in paths}


def _run(git: Git, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Hardened git on the board's repository; its failures as WorktreeError."""
    try:
        return git.run(*args, check=check)
    except GitError as exc:
        raise WorktreeError(exc.message) from None
