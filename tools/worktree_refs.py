"""A worktree card's branch as its sandboxes see it.

git writes a ref as `<name>.lock` renamed over it, so the folder of the card's ref must be
writable to the card; but the repository's folder holds every other card's branch too,
made before the card's sandbox started or after (no read-only bind covers one made later,
and a sandbox lives as long as its card). So the card's sandboxes see there a folder of the
board's own (`BranchMirror`), hidden from every card, holding the card's ref alone; kanban
copies that ref to the repository (`publish`) after each command, at the card's closing
commit and when its sandbox ends, and only when it is a plain file naming a commit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kanban.state.errors import KanbanError
from kanban.tools.gitsafe import Git, GitError
from kanban.tools.replace_file import replace_file
from kanban.workspaces import GitPaths

OBJECT_ID = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # sha1 or sha256
MAX_REF_BYTES = 130  # an object id, a newline, and room to tell a longer value apart


def read_plain(path: Path, limit: int) -> bytes | None:
    """The first `limit` bytes of the regular file at `path`; None for a link, a FIFO (never
    waited on), a folder or a missing file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def branch_tip(git: Git, branch: str) -> str | None:
    """The commit `refs/heads/<branch>` names now (None: no such branch)."""
    found = git.run("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}",
                    check=False)
    return found.stdout.strip() if found.returncode == 0 else None


BRANCH_REFS = "branch-refs"  # in the board's folder: each worktree card's refs, as it sees them


@dataclass(frozen=True)
class BranchMirror:
    """Where a worktree card's sandboxes see its branch's ref (module docstring)."""

    folder: Path  # on the host, in the board's folder
    paths: GitPaths
    branch: str  # kanban/7

    @property
    def name(self) -> str:
        return self.branch.rsplit("/", 1)[1]

    @property
    def target(self) -> Path:
        """The folder of the branch's ref in the repository, where the sandbox sees `folder`."""
        return self.paths.common_dir / "refs" / "heads" / self.branch.rsplit("/", 1)[0]

    def git(self) -> Git:
        common = self.paths.common_dir
        return Git(common, git_dir=common, common_dir=common).without_filters()


def branch_mirror(home: Path, paths: GitPaths, branch: str) -> BranchMirror | None:
    """Where the card's own refs are kept in the board's folder (None: a branch without a
    folder, whose ref folder would be refs/heads itself)."""
    if "/" not in branch:
        return None
    key = hashlib.sha256(f"{paths.common_dir}\0{branch}".encode()).hexdigest()[:24]
    return BranchMirror(home / BRANCH_REFS / key, paths, branch)


LOCK_STALE_S = 60.0  # a git that holds a ref's lock holds it for milliseconds


def seed(mirror: BranchMirror) -> None:
    """The card's refs folder made ready for its sandboxes, when its wall is made. Several
    cards may share a branch (children in their parent's worktree), so a sandbox of one
    may be running: a commit its card made and kanban has not copied out yet is copied
    first; the ref is set from the repository where the repository moved (the user's
    doing) and the cards did not; what else is there (an earlier run's, a model's) goes."""
    root = mirror.folder.parent
    root.mkdir(mode=0o700, exist_ok=True)
    mirror.folder.mkdir(mode=0o700, exist_ok=True)
    if mirror.folder.is_symlink() or not mirror.folder.is_dir():
        raise KanbanError(f"{mirror.folder} is not a folder kanban made")
    own = _own_value(mirror)
    if own is not None and own != _last(mirror):
        publish_or_say(mirror)  # a sharing card's commit, not copied out yet
        own = _own_value(mirror)
    lock = f"{mirror.name}.lock"
    with os.scandir(mirror.folder) as listing:
        for entry in listing:
            if entry.name == mirror.name and own is not None:
                continue
            if entry.name == lock and time.time() - entry.stat(
                    follow_symlinks=False).st_mtime < LOCK_STALE_S:
                continue  # a sharing card's git is writing the ref now
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
    tip = branch_tip(mirror.git(), mirror.branch)
    if own is None or own != tip:
        _set_own(mirror, tip)


def _own_value(mirror: BranchMirror) -> str | None:
    """The commit the card's ref names in its folder (None: none, or not a plain commit
    id: a link, a symbolic ref, a FIFO)."""
    value = read_plain(mirror.folder / mirror.name, MAX_REF_BYTES)
    text = value.decode("ascii", "replace").removesuffix("\n") if value is not None else ""
    return text if OBJECT_ID.match(text) else None


def _last_file(mirror: BranchMirror) -> Path:
    """Beside the card's folder, out of its sandboxes' reach: the value kanban last set or
    copied out, by which a change of the card's is told from one of the repository's."""
    return mirror.folder.parent / f"{mirror.folder.name}.last"


def _last(mirror: BranchMirror) -> str | None:
    try:
        return _last_file(mirror).read_text().strip() or None
    except OSError:
        return None


def _remember(mirror: BranchMirror, value: str | None) -> None:
    replace_file(_last_file(mirror), f"{value or ''}\n".encode(), mode=0o644)


def _set_own(mirror: BranchMirror, tip: str | None) -> None:
    """The card's ref set to `tip` (removed for None), replaced at once."""
    target = mirror.folder / mirror.name
    if tip is None:
        target.unlink(missing_ok=True)
    else:
        replace_file(target, f"{tip}\n".encode(), mode=0o644)
    _remember(mirror, tip)


def publish(mirror: BranchMirror) -> str | None:
    """The card's ref, as its sandbox left it, copied to the repository when the card moved
    it (a repository moved meanwhile by the user, and not by the card, stays as it is);
    None when done or nothing to do, else why not (a link, a symbolic ref, not an object
    id: the model's doing; the repository keeps the branch where it was)."""
    if not os.path.lexists(mirror.folder / mirror.name):
        return None  # never written, or removed inside: the repository keeps its own
    new = _own_value(mirror)
    if new is None:
        return "its ref is not a plain commit id (a link, a symbolic ref or something else)"
    if new == _last(mirror):
        return None  # the card did not move it
    git = mirror.git()
    old = branch_tip(git, mirror.branch)
    if new != old:
        done = git.run("update-ref", "-m", "kanban: the card's commits",
                       f"refs/heads/{mirror.branch}", new, old or "", check=False)
        if done.returncode != 0:
            return done.stderr.strip() or "git update-ref failed"
    _remember(mirror, new)
    return None


def publish_or_say(mirror: BranchMirror) -> None:
    """`publish`, with what went wrong in the worker's log (a command's result stands)."""
    try:
        why = publish(mirror)
    except (OSError, GitError, KanbanError) as exc:
        why = str(exc)
    if why:
        print(f"kanban: branch {mirror.branch} not updated from the card's sandbox: {why}",
              file=sys.stderr, flush=True)
