"""Attacks on the removal of a card's git worktree (`kanban archive`, `gc`, `workspace
--remove`): the model rewrites its checkout's `.git` file to point at the main repository
and plants symlinks to things outside, hoping the removal deletes what they point at."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.security.conftest import Attack
from tests.support.procs import kanban


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def test_a_rewritten_git_file_and_symlinks_do_not_widen_the_removal(attack: Attack,
                                                                    tmp_path: Path) -> None:
    repo = attack.board.home  # the board's folder is the repository's top
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README").write_text("the project\n")
    git("add", "README", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start", cwd=repo)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me\n")
    attack.configure('toolsets = ["kanban", "terminal"]\napproval = "allow"\n'
                     'workspace = "worktree"')
    card, _ = attack.run([("terminal", {"command": (
        f"ln -s {victim} escape; ln -s {repo} project; ln -s {victim}/precious.txt file; "
        f"printf 'gitdir: {repo}/.git\\n' > .git")})])
    checkout = attack.workspace(card)
    assert checkout.is_dir()
    kanban(attack.board.path, "archive", str(card), check=False)
    assert not checkout.exists()
    assert str(checkout) not in git("worktree", "list", cwd=repo)
    assert (victim / "precious.txt").read_text() == "keep me\n"
    assert (repo / "README").read_text() == "the project\n"
    assert (repo / ".git").is_dir() and (repo / "kanban.db").exists()
