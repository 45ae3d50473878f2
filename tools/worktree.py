"""`worktree` workspaces: a git worktree per card on branch `kanban/<card>`, never merged.

`prepare` (the dispatcher, before spawning) checks out the worktree, or reuses it on a
later attempt, and records its git folders in the board's folder, where no card writes;
`finish` (the worker, when the card completes) commits what the agent left and describes
the branch for the card's result. Every git command here is hardened (`gitsafe`); the
worktree's own `.git` file is never read: the model may have rewritten it.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from kanban.state.errors import KanbanError
from kanban.tools.gitsafe import Git, GitError, Wrap, as_is
from kanban.tools.worktree_refs import OBJECT_ID, BranchMirror, branch_tip, publish, read_plain
from kanban.workspaces import GitPaths, Workspace

RECORDS = "worktrees"  # in the board's folder: <board>/<card>.json per worktree
_EXCLUDED = (":(exclude).kanban-outputs", ":(exclude).tool-outputs")  # saved tool outputs
_FALLBACK_IDENTITY = ("kanban", "kanban@localhost")


class WorktreeError(KanbanError):
    """The worktree could not be made or committed (no repository, git failed)."""


def repository_of(home: Path) -> Git:
    """Hardened git on the repository holding the database's folder."""
    try:
        proc = Git(home).run("rev-parse", "--path-format=absolute", "--show-toplevel",
                             "--git-dir", "--git-common-dir", check=False)
    except GitError as exc:
        raise WorktreeError(exc.message) from None
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != 3:
        raise WorktreeError(f"workspace 'worktree' needs the board's folder {home} to be "
                            "inside a git repository")
    top, git_dir, common = (Path(line) for line in lines)
    return Git(top, git_dir=git_dir, common_dir=common, work_tree=top)


def record_path(ws: Workspace, home: Path) -> Path:
    # workspaces/<board>/<card> -> worktrees/<board>/<card>.json
    return home / RECORDS / ws.path.parent.name / f"{ws.path.name}.json"


def prepare(ws: Workspace, home: Path) -> Workspace:
    """Make (or reuse) the card's worktree at `ws.path` on branch `ws.branch`; the
    workspace with the git folders the dispatcher recorded for it."""
    assert ws.branch is not None
    try:
        if (ws.path / ".git").exists() or ws.path.is_symlink():
            return recorded(ws, home)  # an earlier attempt's checkout, with what it left
        paths = _add(ws, home)
    except GitError as exc:
        raise WorktreeError(exc.message) from None
    write_record(record_path(ws, home), {"path": str(ws.path), **paths.to_json(),
                                         "tip": branch_tip(repository_of(home), ws.branch)})
    ensure_branch_folders(paths, ws.branch)
    return Workspace(ws.card_id, ws.kind, ws.path, ws.branch, paths)


def write_record(record: Path, data: dict[str, object]) -> None:
    record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    record.write_text(json.dumps(data))


def remember_tip(ws: Workspace, home: Path) -> None:
    """After the card's closing commit, its branch's tip in the board's record: checked
    out again later (its worktree removed by hand meanwhile), the branch is known as the
    one this board left there."""
    record = record_path(ws, home)
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(data, dict) or ws.branch is None:
        return
    try:
        tip = branch_tip(repository_of(home), ws.branch)
    except (GitError, WorktreeError):
        return
    if tip is not None:
        write_record(record, {**data, "tip": tip})


def _left_by_kanban(ws: Workspace, home: Path, tip: str | None) -> bool:
    """Whether this board recorded the card's branch at `tip`: when it made the card's
    worktree, or when it removed it (`kanban gc`). A branch `kanban/<card>` of a card
    that never had a worktree is not kanban's: another card's commands can create one
    (the branch folder is writable to every worktree card), and checking it out would
    run what they planted with the new card's rights."""
    try:
        data = json.loads(record_path(ws, home).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and tip is not None and data.get("tip") == tip


def recorded(ws: Workspace, home: Path) -> Workspace:
    """`ws` with the git folders recorded when it was made; WorktreeError without them."""
    try:
        data = json.loads(record_path(ws, home).read_text())
        paths = GitPaths.from_json(data)
        if data["path"] != str(ws.path):
            raise ValueError("recorded for another path")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WorktreeError(f"the worktree {ws.path} has no record of its git folders "
                            f"({exc}); remove it to start the card afresh") from None
    if not _sound(paths):
        raise WorktreeError(f"the recorded git folder {paths.git_dir} of {ws.path} is gone")
    if repository_of(home).common_dir != paths.common_dir:  # a record can name no other
        raise WorktreeError(f"the worktree {ws.path} was recorded in another repository "
                            f"({paths.common_dir})")
    assert ws.branch is not None
    ensure_branch_folders(paths, ws.branch)
    return Workspace(ws.card_id, ws.kind, ws.path, ws.branch, paths)


def ensure_branch_folders(paths: GitPaths, branch: str) -> None:
    """The folders a commit on `branch` writes to (gc may have packed them away)."""
    folder = branch.rsplit("/", 1)[0]
    for sub in (Path("refs/heads") / folder, Path("logs/refs/heads") / folder):
        (paths.common_dir / sub).mkdir(parents=True, exist_ok=True)


def _sound(paths: GitPaths) -> bool:
    return (paths.git_dir.parent == paths.common_dir / "worktrees" and paths.git_dir.is_dir()
            and not paths.git_dir.is_symlink() and bool(OBJECT_ID.match(paths.base)))


def _add(ws: Workspace, home: Path) -> GitPaths:
    """`git worktree add`, hooks and filters off; the folders git made for it, read back
    before any model has run there."""
    assert ws.branch is not None
    repo = repository_of(home).without_filters()
    assert repo.common_dir is not None
    repo.run("worktree", "prune")
    _clear_planted_lock(repo.common_dir / "refs" / "heads" / f"{ws.branch}.lock")
    ws.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    exists = repo.run("rev-parse", "--verify", "--quiet", f"refs/heads/{ws.branch}",
                      check=False).returncode == 0
    head = repo.run("rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    if head.returncode != 0:
        raise WorktreeError(f"the repository {repo.cwd} has no commit to branch from")
    if exists:
        tip = branch_tip(repo, ws.branch)
        if not _left_by_kanban(ws, home, tip):
            raise WorktreeError(
                f"branch {ws.branch} already exists (at {(tip or '?')[:12]}) but this board "
                "did not leave it there: another card's commands may have made it. Check it, "
                f"then delete or rename it (git branch -m {ws.branch} <new name>) to run "
                "this card")
        repo.run("worktree", "add", str(ws.path), ws.branch)
    else:
        repo.run("worktree", "add", "-b", ws.branch, str(ws.path), "HEAD")
    made = Git(ws.path).run("rev-parse", "--path-format=absolute", "--git-dir")
    base = (repo.run("merge-base", "HEAD", ws.branch).stdout if exists else head.stdout)
    paths = GitPaths(Path(made.stdout.strip()), repo.common_dir, base.strip())
    if not _sound(paths):
        raise WorktreeError(f"git made the worktree {ws.path} somewhere unexpected "
                            f"({paths.git_dir})")
    # there (read if the repository has extensions.worktreeConfig), empty and read-only
    # inside the sandbox: the model cannot give git in this worktree a config of its own
    (paths.git_dir / "config.worktree").touch()
    return paths


def _clear_planted_lock(lock: Path) -> None:
    """A lock on the branch of a card that has no worktree yet: nothing but this step
    writes that branch now (its card has not started), so the lock was left by another
    card's commands (the branch folder is theirs to write) or by a crash, and would fail
    the checkout. A plain file goes; anything else is refused."""
    try:
        mode = lock.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise WorktreeError(f"{lock} is not a lock file git could have left; remove it to "
                            "run this card")
    try:  # swapped for a folder meanwhile: refused, never an error the dispatcher trips on
        lock.unlink(missing_ok=True)
    except OSError as exc:
        raise WorktreeError(f"cannot remove {lock}: {exc.strerror}") from None


def worktree_git(ws: Workspace, wrap: Wrap = as_is) -> Git:
    """Hardened git on the card's worktree, from its recorded folders, filters off."""
    if ws.git is None:
        raise WorktreeError(f"the worktree {ws.path} has no recorded git folders")
    return Git(ws.path, git_dir=ws.git.git_dir, common_dir=ws.git.common_dir,
               work_tree=ws.path, wrap=wrap).without_filters()


def finish(ws: Workspace, message: str, wrap: Wrap = as_is,
           mirror: BranchMirror | None = None) -> str:
    """Commit the worktree's changes on its branch; a note naming the branch and its
    `git diff --stat`. `wrap` runs each git command inside the card's sandbox, where the
    branch's ref is `mirror`'s (published to the repository after the commit)."""
    if ws.git is None or ws.branch is None:
        raise WorktreeError(f"the worktree {ws.path} has no recorded git folders")
    try:
        return _finish(ws, ws.git, message, wrap, mirror)
    except GitError as exc:
        raise WorktreeError(exc.message) from None


def _finish(ws: Workspace, paths: GitPaths, message: str, wrap: Wrap,
            mirror: BranchMirror | None) -> str:
    branch = f"refs/heads/{ws.branch}"
    _repair_commondir(paths)
    git = worktree_git(ws, wrap)
    loose = paths.common_dir / branch if mirror is None else mirror.folder / mirror.name
    _plain_branch(loose, branch, git)
    if git.run("symbolic-ref", "-q", "HEAD", check=False).stdout.strip() != branch:
        git.run("symbolic-ref", "HEAD", branch)  # the model may have moved HEAD elsewhere
    git.run("add", "-A", "--", ".", *_EXCLUDED, *_gitlinks(git))
    if git.run("diff", "--cached", "--quiet", "--no-ext-diff", check=False).returncode != 0:
        name, email = _identity(Git(ws.path, paths.git_dir, paths.common_dir, ws.path))
        git.run("-c", f"user.name={name}", "-c", f"user.email={email}", "commit", "--quiet",
                "--no-verify", "--no-gpg-sign", "-m", message)
    if mirror is not None:
        why = publish(mirror)
        if why:
            raise WorktreeError(f"branch {ws.branch} was not updated: {why}")
    stat = git.run("diff", "--stat", "--no-ext-diff", "--no-textconv",
                   f"{paths.base}..{branch}", "--", check=False).stdout.rstrip()
    head = git.run("rev-parse", "--short", branch).stdout.strip()
    return (f"Workspace: git worktree {ws.path} on branch {ws.branch} at {head} (not merged)"
            + (f"\n{stat}" if stat else "\n(no changes)"))


def _plain_branch(loose: Path, ref: str, git: Git) -> None:
    """The card's branch made a plain ref again if the model turned it into a symbolic one
    (a symlink, or a file reading `ref: refs/heads/main`): the card's commit, and the
    user's next commits on the branch, would move the branch it names instead. `loose`:
    where the branch's ref is as the card's git sees it."""
    if not (loose.is_symlink() or (read_plain(loose, 4) or b"") == b"ref:"):
        return
    tip = git.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}",
                  check=False).stdout.strip()
    loose.unlink()  # the link or the file itself, never what it names
    if tip:
        git.run("update-ref", "--no-deref", "-m", "kanban: the card's branch made plain",
                ref, tip)


def _repair_commondir(paths: GitPaths) -> None:
    """git's ref store reads the admin folder's `commondir` whatever GIT_COMMON_DIR says:
    one the model rewrote would send the branch's ref to a repository of its choosing."""
    commondir = paths.git_dir / "commondir"
    try:
        named = commondir.read_text().strip()
    except OSError:
        named = ""
    if not named or (paths.git_dir / named).resolve() != paths.common_dir.resolve():
        commondir.unlink(missing_ok=True)
        commondir.write_text("../..\n")


def _gitlinks(git: Git) -> list[str]:
    """Nested repositories already in the index, left out of `add -A`: git would run
    `git status` inside each, under the config (fsmonitor, filters) the model gave it."""
    listed = git.run("ls-files", "-z", "--stage").stdout.split("\0")
    return [f":(exclude,literal){entry.split(chr(9), 1)[1]}" for entry in listed
            if entry.startswith("160000 ") and "\t" in entry]


def _identity(git: Git) -> tuple[str, str]:
    """The user's name and email from their config (read on the host: reading config runs
    nothing), else kanban's."""
    name = git.run("config", "--get", "user.name", check=False).stdout.strip()
    email = git.run("config", "--get", "user.email", check=False).stdout.strip()
    if not email:
        return _FALLBACK_IDENTITY
    return (name or _FALLBACK_IDENTITY[0]), email
