"""kanban's own git on a card's worktree, attacked directly on the host (as if the sandbox
wall had failed, or no sandbox ran): a planted `.git` file or `commondir`, a moved HEAD,
hooks, fsmonitor and filter drivers in the repository, a nested repository with a config
of its own, a tampered record. None redirects kanban's git or runs planted code."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kanban.tools import worktree
from kanban.tools.gitsafe import Git
from kanban.workspaces import Workspace


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def repository(path: Path) -> Path:
    path.mkdir()
    git("init", "-q", "-b", "main", cwd=path)
    (path / "README").write_text("hi\n")
    git("add", ".", cwd=path)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start", cwd=path)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return repository(tmp_path / "repo")


def made(repo: Path, card: int = 7) -> tuple[Workspace, Path]:
    """A worktree made by the dispatcher's step; with the board's folder."""
    home = repo / ".kanban"
    home.mkdir(exist_ok=True)
    ws = Workspace(card, "worktree", home / "workspaces" / "default" / str(card),
                   f"kanban/{card}")
    return worktree.prepare(ws, home), home


def payload(tmp_path: Path, name: str = "evil.sh") -> tuple[Path, Path]:
    """A script that leaves a marker wherever it runs (and passes stdin through)."""
    marker, script = tmp_path / f"{name}.ran", tmp_path / name
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    script.chmod(0o755)
    return script, marker


def test_a_planted_git_file_and_commondir_do_not_redirect_kanbans_git(
        repo: Path, tmp_path: Path) -> None:
    victim = repository(tmp_path / "victim")
    ws, home = made(repo)
    assert ws.git is not None
    (ws.path / ".git").write_text(f"gitdir: {victim}/.git\n")
    (ws.git.git_dir / "commondir").write_text(f"{victim}/.git\n")
    (ws.path / "work.txt").write_text("work\n")
    note = worktree.finish(ws, "kanban #7: work")
    assert "on branch kanban/7" in note and "work.txt" in note
    assert git("show", "kanban/7:work.txt", cwd=repo) == "work"
    assert git("log", "--all", "--format=%s", cwd=victim) == "start"
    # the next attempt takes the record, not the planted files
    assert worktree.prepare(Workspace(7, "worktree", ws.path, "kanban/7"), home) == ws


def test_a_moved_head_does_not_make_kanban_commit_on_the_users_branch(repo: Path) -> None:
    ws, _home = made(repo)
    assert ws.git is not None
    (ws.git.git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    (ws.path / "work.txt").write_text("work\n")
    worktree.finish(ws, "kanban #7: work")
    assert git("log", "--format=%s", "main", cwd=repo) == "start"
    assert git("show", "kanban/7:work.txt", cwd=repo) == "work"


def test_hooks_fsmonitor_and_filters_in_the_repository_never_run(
        repo: Path, tmp_path: Path) -> None:
    script, marker = payload(tmp_path)
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction",
                 "post-index-change", "prepare-commit-msg", "commit-msg", "pre-auto-gc"):
        (repo / ".git" / "hooks" / hook).symlink_to(script)
    for key, value in (("core.fsmonitor", str(script)), ("filter.evil.clean", str(script)),
                       ("filter.evil.smudge", str(script)), ("filter.evil.required", "true"),
                       ("diff.evil.textconv", str(script)), ("diff.external", str(script)),
                       ("core.pager", str(script))):
        git("config", key, value, cwd=repo)
    (repo / ".git" / "info" / "attributes").write_text("* filter=evil diff=evil\n")
    ws, _home = made(repo)
    (ws.path / "work.txt").write_text("work\n")
    (ws.path / ".gitattributes").write_text("* filter=evil diff=evil\n")
    note = worktree.finish(ws, "kanban #7: work")
    assert "work.txt" in note
    assert not marker.exists()


def test_a_nested_repository_with_its_own_config_runs_nothing(
        repo: Path, tmp_path: Path) -> None:
    """`git add -A` would run `git status` inside a nested repository already in the index,
    under that repository's config (an fsmonitor, a filter driver of its own)."""
    script, marker = payload(tmp_path)
    ws, _home = made(repo)
    nested = ws.path / "sub"
    nested.mkdir()
    git("init", "-q", cwd=nested)
    (nested / "f").write_text("a\n")
    git("add", "f", cwd=nested)
    git("-c", "user.name=m", "-c", "user.email=m@m", "commit", "-qm", "n", cwd=nested)
    worktree.finish(ws, "kanban #7: nested")  # the model's repository is now a gitlink
    git("config", "core.fsmonitor", str(script), cwd=nested)
    git("config", "filter.own.clean", str(script), cwd=nested)
    (nested / ".gitattributes").write_text("* filter=own\n")
    (nested / "f").write_text("b\n")
    (ws.path / "work.txt").write_text("work\n")
    worktree.finish(ws, "kanban #7: more")
    assert not marker.exists()
    assert git("show", "kanban/7:work.txt", cwd=repo) == "work"


def test_a_worktree_without_a_sound_record_is_refused(repo: Path, tmp_path: Path) -> None:
    ws, home = made(repo)
    bare = Workspace(7, "worktree", ws.path, "kanban/7")
    record = worktree.record_path(ws, home)
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "git_dir": str(tmp_path)}))
    with pytest.raises(worktree.WorktreeError, match="is gone"):
        worktree.prepare(bare, home)
    record.write_text(json.dumps({**data, "base": "--output=/tmp/x"}))
    with pytest.raises(worktree.WorktreeError, match="is gone"):
        worktree.prepare(bare, home)
    elsewhere = repository(tmp_path / "elsewhere") / ".git"
    (elsewhere / "worktrees" / "7").mkdir(parents=True)
    record.write_text(json.dumps({**data, "common_dir": str(elsewhere),
                                  "git_dir": str(elsewhere / "worktrees" / "7")}))
    with pytest.raises(worktree.WorktreeError, match="another repository"):
        worktree.prepare(bare, home)
    record.unlink()
    with pytest.raises(worktree.WorktreeError, match="no record"):
        worktree.prepare(bare, home)
    with pytest.raises(worktree.WorktreeError, match="no recorded git folders"):
        worktree.finish(bare, "kanban #7")


def test_kanbans_git_inherits_nothing_but_locale_path_and_home(tmp_path: Path) -> None:
    env = Git(tmp_path, tmp_path / "g", tmp_path / "c", tmp_path / "w").env(
        {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "OPENAI_API_KEY": "sk-x",
         "GIT_SSH_COMMAND": "evil", "GIT_CONFIG_PARAMETERS": "'core.pager'='evil'"})
    assert env["GIT_DIR"] == str(tmp_path / "g") and env["GIT_COMMON_DIR"] == str(
        tmp_path / "c") and env["GIT_WORK_TREE"] == str(tmp_path / "w")
    assert "OPENAI_API_KEY" not in env and "GIT_SSH_COMMAND" not in env
    assert "GIT_CONFIG_PARAMETERS" not in env and env["GIT_CONFIG_NOSYSTEM"] == "1"
    keys = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
            for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert keys["core.hooksPath"] == "/dev/null" and keys["core.fsmonitor"] == "false"
