"""Git inside the sandbox wall: which parts of a repository a card's commands may write.

A worktree card commits on its own branch, so the shared repository's objects, this
worktree's admin folder and the `kanban/` branch folders are writable; the rest of the
repository (hooks, config, info, packed-refs, HEAD, other branches, other worktrees) is
bound read-only over them. A repository at the top of a writable folder (a `dir:` checkout)
keeps its git folder read-only (as Codex does), and so do the shell start-up files there:
what runs outside the sandbox later (a hook at the user's next commit, a login shell) is
never the model's to write. Everything comes from paths the dispatcher recorded, never
from a file in the workspace.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from kanban.workspaces import GitPaths

# Files at the top of a writable folder that run (or configure what runs) outside it.
STARTUP_FILES = (".bashrc", ".profile", ".bash_profile", ".bash_login", ".bash_logout",
                 ".zshrc", ".zprofile", ".zshenv", ".zlogin", ".gitconfig")
ADMIN_PROTECTED = ("gitdir", "commondir", "config.worktree")  # in a worktree's admin folder
# Repositories nested in a writable folder (clones side by side in `dir:~/src`) are found
# this deep, looking at no more entries than this; their git folders stay read-only too.
NESTED_DEPTH = 4
NESTED_ENTRIES = 50_000
NESTED_MAX = 256
NOT_SEARCHED = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", ".tox",
                          ".mypy_cache", ".cache", "target", "build", "dist"})


@dataclass(frozen=True)
class Wall:
    """Folders bound writable, and paths bound read-only over (or around) them."""

    writable: tuple[Path, ...]
    readonly: tuple[Path, ...]


def card_wall(workspace: Path, git: GitPaths | None = None, branch: str | None = None, *,
              scratch: bool = False, hidden: tuple[Path, ...] = ()) -> Wall:
    """The wall of a card working in `workspace` (a worktree: with its recorded `git`
    folders and `branch`). A `scratch` folder is kanban's own: a repository the model made
    there was the model's from the start, and stays writable. `hidden` folders (the
    board's) are not searched for nested repositories."""
    writable: list[Path] = [workspace]
    readonly: list[Path] = []
    if git is not None and branch is not None:
        worktree = worktree_wall(git, branch)
        writable += worktree.writable
        readonly += worktree.readonly
    top = Wall((), ()) if scratch else protected_top(workspace, hidden)
    return Wall((*writable, *top.writable), (*readonly, *top.readonly))


def worktree_wall(git: GitPaths, branch: str) -> Wall:
    """A commit on `branch` writes objects, the worktree's HEAD/index/logs and the branch's
    ref and reflog; the rest of the repository is read-only."""
    folder = Path(branch).parent  # kanban/<card> -> kanban
    common = git.common_dir
    writable = (common / "objects", git.git_dir, common / "refs" / "heads" / folder,
                common / "logs" / "refs" / "heads" / folder)
    admin = tuple(git.git_dir / name for name in ADMIN_PROTECTED
                  if _plain_file(git.git_dir / name))
    return Wall(tuple(p for p in writable if p.is_dir()), (common, *admin))


def protected_top(area: Path, hidden: tuple[Path, ...] = ()) -> Wall:
    """What stays read-only at the top of a writable folder: a repository's whole git
    folder (hooks and config alone are not enough: a `commondir` file, a nested
    repository's config or a gitlink in the index would point git at the model's own),
    a worktree's `.git` file, the shell start-up files, and the git folders of the
    repositories nested below it."""
    readonly = [area / name for name in STARTUP_FILES if _plain_file(area / name)]
    dot_git = area / ".git"
    if _plain_file(dot_git) or (dot_git.is_dir() and not dot_git.is_symlink()):
        readonly.append(dot_git)
    return Wall((), (*readonly, *nested_git(area, hidden)))


def nested_git(area: Path, skip: tuple[Path, ...] = ()) -> tuple[Path, ...]:
    """The `.git` folders and files of repositories below the top of `area` (a bounded
    walk that follows no symlink): a hook or config planted there runs the next time the
    user runs git in that repository, outside every sandbox. Shallow folders first, so
    decoys a card made deep down cannot use up the walk before the repositories near the
    top are found. `skip`: folders not entered."""
    skipped = {os.path.realpath(p) for p in skip}
    found: list[Path] = []
    queue, seen = deque([(area, 0)]), 0
    while queue and seen < NESTED_ENTRIES and len(found) < NESTED_MAX:
        folder, depth = queue.popleft()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                if entry.is_symlink():
                    continue
                if entry.name == ".git" and depth > 0 and (entry.is_dir() or entry.is_file()):
                    found.append(Path(entry.path))
                elif entry.is_dir() and depth + 1 < NESTED_DEPTH \
                        and entry.name not in NOT_SEARCHED \
                        and os.path.realpath(entry.path) not in skipped:
                    queue.append((Path(entry.path), depth + 1))
            except OSError:
                continue
    return tuple(sorted(found)[:NESTED_MAX])


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()
