"""Workspace specs, their resolution through parents, and git worktrees."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.errors import ValidationError
from kanban.service import Kanban
from kanban.tools import worktree
from kanban.workspaces import GitPaths, Workspace, normalise_spec, parse_spec


def test_specs(tmp_path: Path) -> None:
    assert str(parse_spec(None)) == str(parse_spec("scratch")) == "scratch"
    assert parse_spec("dir:/x/y").path == "/x/y"
    with pytest.raises(ValidationError, match="unknown workspace 'cloud'"):
        parse_spec("cloud")
    (tmp_path / "proj").mkdir()
    assert normalise_spec("dir:proj", base=tmp_path, has_parent=False) == f"dir:{tmp_path}/proj"
    assert normalise_spec("scratch", base=tmp_path, has_parent=False) is None
    with pytest.raises(ValidationError, match="not an existing directory"):
        normalise_spec("dir:missing", base=tmp_path, has_parent=False)
    with pytest.raises(ValidationError, match="needs a parent card"):
        normalise_spec("parent", base=tmp_path, has_parent=False)


def test_resolution_follows_parents_and_profile_defaults(kb: Kanban, tmp_path: Path) -> None:
    home = tmp_path / "home"
    lead = kb.add_card(NewCard(title="lead")).id
    shared = kb.add_card(NewCard(title="a", parent_id=lead, workspace="parent")).id
    deeper = kb.add_card(NewCard(title="b", parent_id=shared, workspace="parent")).id
    tree = kb.add_card(NewCard(title="c", profile="coder")).id
    assert kb.workspace(deeper, home) == Workspace(lead, "scratch",
                                                   home / "workspaces" / "default" / str(lead))
    assert kb.workspace(shared, home).path == kb.workspace(lead, home).path
    resolved = kb.workspace(tree, home, {"coder": "worktree"})
    assert (resolved.kind, resolved.branch) == ("worktree", f"kanban/{tree}")
    with pytest.raises(ValidationError, match="needs a parent card"):
        kb.add_card(NewCard(title="orphan", workspace="parent"))


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_worktree_is_made_reused_committed_and_described(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README").write_text("hi\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start", cwd=repo)
    home = repo / ".kanban"
    home.mkdir()
    ws = Workspace(7, "worktree", home / "workspaces" / "default" / "7", "kanban/7")
    ws = worktree.prepare(ws, home)
    assert ws.git is not None and ws.git.common_dir == repo / ".git"
    assert (ws.path / "README").read_text() == "hi\n"
    (ws.path / "feature.txt").write_text("new\n")
    (ws.path / ".kanban-outputs").mkdir()
    (ws.path / ".kanban-outputs" / "cut.txt").write_text("scratch output")
    assert worktree.prepare(ws, home) == ws  # a later attempt keeps what the earlier one left
    assert (ws.path / "feature.txt").exists()
    note = worktree.finish(ws, "kanban #7: add a feature")
    assert "on branch kanban/7" in note and "feature.txt | 1 +" in note
    assert git("log", "-1", "--format=%s", "kanban/7", cwd=repo) == "kanban #7: add a feature"
    assert git("show", "--name-only", "--format=", "kanban/7", cwd=repo) == "feature.txt"
    assert git("branch", "--show-current", cwd=repo) == "main"  # never merged
    assert not (repo / "feature.txt").exists()


def test_worktree_needs_a_repository(tmp_path: Path) -> None:
    with pytest.raises(worktree.WorktreeError, match="inside a git repository"):
        worktree.prepare(Workspace(1, "worktree", tmp_path / "w", "kanban/1"), tmp_path)


def test_a_workspace_travels_to_its_worker_with_its_recorded_git_folders() -> None:
    git = GitPaths(Path("/r/.git/worktrees/7"), Path("/r/.git"), "a" * 40)
    ws = Workspace(7, "worktree", Path("/r/.kanban/workspaces/default/7"), "kanban/7", git)
    assert Workspace.from_json(json.loads(json.dumps(ws.to_json()))) == ws
    plain = Workspace(3, "scratch", Path("/w"))
    assert Workspace.from_json(plain.to_json()) == plain
    with pytest.raises(ValueError, match="not a workspace"):
        Workspace.from_json({**ws.to_json(), "git": {"git_dir": "/x"}})
