"""`worktree` workspaces: a git worktree per card on branch `kanban/<card>`, never merged.

`prepare` (the dispatcher, before spawning) checks out the worktree, or reuses it on a
later attempt; `finish` (the worker, when the card completes) commits what the agent left
and describes the branch for the card's result.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kanban.state.errors import KanbanError
from kanban.workspaces import Workspace

GIT_TIMEOUT_S = 120
BASE_FILE = "kanban-base"  # in the worktree's git dir: the commit the branch started from
_EXCLUDED = (":(exclude).kanban-outputs", ":(exclude).tool-outputs")  # saved tool outputs
_FALLBACK_IDENTITY = ("-c", "user.name=kanban", "-c", "user.email=kanban@localhost")


class WorktreeError(KanbanError):
    """The worktree could not be made or committed (no repository, git failed)."""


def git(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise WorktreeError("worktree workspaces need git, which is not installed") from None
    except subprocess.TimeoutExpired:
        raise WorktreeError(f"git {args[0]} took over {GIT_TIMEOUT_S}s") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise WorktreeError(f"git {' '.join(args[:2])} failed: {detail[-1] if detail else ''}")
    return proc


def repository_of(home: Path) -> Path:
    """The repository holding the database's folder."""
    proc = git("rev-parse", "--show-toplevel", cwd=home, check=False)
    if proc.returncode != 0:
        raise WorktreeError(f"workspace 'worktree' needs the board's folder {home} to be "
                            "inside a git repository")
    return Path(proc.stdout.strip())


def prepare(ws: Workspace, home: Path) -> None:
    """Make (or reuse) the card's worktree at `ws.path` on branch `ws.branch`."""
    assert ws.branch is not None
    if (ws.path / ".git").exists():
        return  # an earlier attempt's checkout, with whatever it left
    repo = repository_of(home)
    git("worktree", "prune", cwd=repo)
    ws.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    exists = git("rev-parse", "--verify", "--quiet", f"refs/heads/{ws.branch}", cwd=repo,
                 check=False).returncode == 0
    head = git("rev-parse", "--verify", "--quiet", "HEAD", cwd=repo, check=False)
    if head.returncode != 0:
        raise WorktreeError(f"the repository {repo} has no commit to branch from")
    if exists:
        git("worktree", "add", str(ws.path), ws.branch, cwd=repo)
    else:
        git("worktree", "add", "-b", ws.branch, str(ws.path), "HEAD", cwd=repo)
    git_dir = Path(git("rev-parse", "--absolute-git-dir", cwd=ws.path).stdout.strip())
    base = (git("merge-base", "HEAD", ws.branch, cwd=repo).stdout if exists
            else head.stdout)
    (git_dir / BASE_FILE).write_text(base.strip())


def finish(ws: Workspace, message: str) -> str:
    """Commit the worktree's changes; a note naming the branch and its `git diff --stat`."""
    git("add", "-A", "--", ".", *_EXCLUDED, cwd=ws.path)
    staged = git("diff", "--cached", "--quiet", cwd=ws.path, check=False).returncode != 0
    if staged:
        identity = () if git("config", "user.email", cwd=ws.path, check=False).stdout.strip() \
            else _FALLBACK_IDENTITY
        git(*identity, "commit", "--quiet", "--no-verify", "-m", message, cwd=ws.path)
    git_dir = Path(git("rev-parse", "--absolute-git-dir", cwd=ws.path).stdout.strip())
    base_file = git_dir / BASE_FILE
    base = base_file.read_text().strip() if base_file.exists() else "HEAD~1"
    stat = git("diff", "--stat", f"{base}..HEAD", cwd=ws.path, check=False).stdout.rstrip()
    head = git("rev-parse", "--short", "HEAD", cwd=ws.path).stdout.strip()
    return (f"Workspace: git worktree {ws.path} on branch {ws.branch} at {head} (not merged)"
            + (f"\n{stat}" if stat else "\n(no changes)"))
