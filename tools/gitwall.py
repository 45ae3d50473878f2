"""Git inside the sandbox wall: which parts of a repository a card's commands may write.

A worktree card commits on its own branch, so the shared repository's objects, this
worktree's admin folder, its branch's ref (in a folder where the other branches are bound
read-only) and its reflog are writable; the rest of the repository (hooks, config, info,
packed-refs, HEAD, other branches, other worktrees) is bound read-only over them. A
repository in a writable folder (a `dir:` checkout, or any repository below it) keeps its
git folder read-only (as Codex does), and so do the shell start-up files at its top: what
runs outside the sandbox later (a hook at the user's next commit, a login shell) is never
the model's to write. Everything comes from paths the dispatcher recorded, never from a
file in the workspace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kanban.state.errors import ConfigError
from kanban.workspaces import GitPaths

# Files at the top of a writable folder that run (or configure what runs) outside it.
STARTUP_FILES = (".bashrc", ".profile", ".bash_profile", ".bash_login", ".bash_logout",
                 ".zshrc", ".zprofile", ".zshenv", ".zlogin", ".gitconfig")
ADMIN_PROTECTED = ("gitdir", "commondir", "config.worktree")  # in a worktree's admin folder
# Repositories nested in a writable folder (clones side by side in `dir:~/src`, editable
# installs in `.venv/src/`, vendored checkouts under `build/`) are looked for in every
# folder, at any depth; past either budget the card is refused rather than left with a
# git folder the walk did not see (see `nested_git`).
NESTED_ENTRIES = 500_000
NESTED_MAX = 1024


@dataclass(frozen=True)
class Wall:
    """Folders bound writable, and paths bound read-only over (or around) them; `moved`:
    (folder, where the sandbox sees it) bound writable (a worktree card's own refs)."""

    writable: tuple[Path, ...]
    readonly: tuple[Path, ...]
    moved: tuple[tuple[Path, Path], ...] = ()


def card_wall(workspace: Path, git: GitPaths | None = None, branch: str | None = None, *,
              scratch: bool = False, hidden: tuple[Path, ...] = (),
              refs: Path | None = None) -> Wall:
    """The wall of a card working in `workspace` (a worktree: with its recorded `git`
    folders and `branch`, and the folder of its own `refs`: kanban.tools.worktree_refs'
    BranchMirror). A `scratch` folder is kanban's own: a repository the model made there
    was the model's from the start, and stays writable. `hidden` folders (the board's) are
    not searched for nested repositories."""
    writable: list[Path] = [workspace]
    readonly: list[Path] = []
    moved: tuple[tuple[Path, Path], ...] = ()
    if git is not None and branch is not None:
        worktree = worktree_wall(git, branch, refs)
        writable += worktree.writable
        readonly += worktree.readonly
        moved = worktree.moved
    top = Wall((), ()) if scratch else protected_top(workspace, hidden)
    return Wall((*writable, *top.writable), (*readonly, *top.readonly), moved)


def worktree_wall(git: GitPaths, branch: str, refs: Path | None = None) -> Wall:
    """A commit on `branch` writes objects, the worktree's HEAD/index/logs and the branch's
    ref and reflog; the rest of the repository is read-only. git writes a ref as
    `<name>.lock` renamed over it, so the ref's folder must be writable: with `refs` (the
    card's own folder, holding its ref alone) that folder is seen there instead, and the
    other `kanban/*` branches, whenever they were made, are not there at all; without, the
    repository's folder is writable with the entries it holds now bound read-only over it.
    The reflog is appended in place: it alone is bound writable, as a file (a bind mount
    cannot be replaced by a symlink that would send git's next append, outside the sandbox,
    anywhere)."""
    common = git.common_dir
    ref = common / "refs" / "heads" / branch
    reflog = common / "logs" / "refs" / "heads" / branch
    writable = [common / "objects", git.git_dir]
    moved: tuple[tuple[Path, Path], ...] = ()
    siblings: tuple[Path, ...] = ()
    if refs is not None:
        moved = ((refs, ref.parent),)
    elif ref.parent.is_dir() and not ref.parent.is_symlink():
        writable.append(ref.parent)
        siblings = _siblings(ref)
    if _plain_file(reflog):
        writable.append(reflog)
    admin = tuple(git.git_dir / name for name in ADMIN_PROTECTED
                  if _plain_file(git.git_dir / name))
    return Wall(tuple(p for p in writable if p.exists()), (common, *admin, *siblings), moved)


def _siblings(ref: Path) -> tuple[Path, ...]:
    """The other branches in `ref`'s folder (files and folders, not links: a bind would
    follow one), to bind read-only there."""
    own = {ref.name, f"{ref.name}.lock"}
    try:
        with os.scandir(ref.parent) as listing:
            return tuple(sorted(Path(e.path) for e in listing if e.name not in own
                                and not e.is_symlink() and (e.is_file() or e.is_dir())))
    except OSError:
        return ()


def protected_top(area: Path, hidden: tuple[Path, ...] = ()) -> Wall:
    """What stays read-only at the top of a writable folder: a repository's whole git
    folder (hooks and config alone are not enough: a `commondir` file, a nested
    repository's config or a gitlink in the index would point git at the model's own),
    a worktree's `.git` file, the shell start-up files, and the git folders of the
    repositories nested below it (the folders leading to them pinned in place)."""
    readonly = [area / name for name in STARTUP_FILES if _plain_file(area / name)]
    dot_git = area / ".git"
    if _plain_file(dot_git) or (dot_git.is_dir() and not dot_git.is_symlink()):
        readonly.append(dot_git)
    nested = nested_git(area, hidden)
    return Wall(_pinned(area, nested), (*readonly, *nested))


def _pinned(area: Path, nested: tuple[Path, ...]) -> tuple[Path, ...]:
    """The folders between `area` and each nested git folder, bound writable onto
    themselves: a mount point cannot be renamed, so the card cannot move the user's
    repository aside and leave a `git init` of its own (its hooks, its config) where the
    user will next run git."""
    pinned = {parent for path in nested for parent in path.parents
              if area in parent.parents}
    return tuple(sorted(pinned, key=lambda p: (len(p.parts), p)))


def nested_git(area: Path, skip: tuple[Path, ...] = ()) -> tuple[Path, ...]:
    """The `.git` folders and files of the repositories anywhere below the top of `area`,
    and the folders there it cannot list: a hook or config planted in one runs the next
    time the user runs git in that repository, outside every sandbox. Every folder is
    looked in, at any depth, `node_modules`, `.venv/src` and `build` too (a repository
    there is the user's as much as one at the top); no symlink is followed and no `.git`
    entered. One `scandir` per folder and no `stat` (the listing gives each entry's type)
    keeps this cheap. Fail closed: past NESTED_ENTRIES entries or NESTED_MAX repositories
    (each is a bind mount) it raises ConfigError naming where it stopped, rather than leave
    a repository it did not see writable. `skip`: folders not entered (the board's)."""
    skipped = _beneath(area, skip)
    found: list[str] = []
    stack, seen = [str(area)], 0
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except FileNotFoundError:
            continue
        except OSError:  # a folder it cannot list may hold one: read-only as a whole
            entries = []
            if folder != str(area):
                found.append(folder)
        seen += len(entries)
        if seen > NESTED_ENTRIES:
            raise ConfigError(_too_big(area, f"more than {NESTED_ENTRIES:,} files and "
                                             f"folders (it stopped in {folder})"))
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                if entry.name == ".git":
                    if folder != str(area) and (entry.is_dir() or entry.is_file()):
                        found.append(entry.path)
                elif entry.is_dir() and entry.path not in skipped:
                    stack.append(entry.path)
            except OSError:
                continue
        if len(found) > NESTED_MAX:
            raise ConfigError(_too_big(area, f"more than {NESTED_MAX} git repositories "
                                             f"(one is {Path(found[-1]).parent})"))
    return tuple(Path(p) for p in sorted(found))


def _beneath(area: Path, folders: tuple[Path, ...]) -> set[str]:
    """`folders` as the walk from `area` spells them (it follows no symlink, so comparing
    its paths as strings is enough once theirs are resolved the same way)."""
    real = Path(os.path.realpath(area))
    spelled = set()
    for folder in folders:
        resolved = Path(os.path.realpath(folder))
        if resolved == real or real in resolved.parents:
            spelled.add(str(area / resolved.relative_to(real)))
    return spelled


def _too_big(area: Path, what: str) -> str:
    return (f"the card's workspace {area} holds {what}: kanban looks through all of it for "
            "git repositories, whose hooks and config must stay out of the card's reach; "
            "give the card a smaller folder as its workspace (dir:PATH)")


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()
