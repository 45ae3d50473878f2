"""Git folders a card could write that the wall used not to see: repositories in a `dir:`
workspace deeper than four folders, inside `.venv/src` or `build/` (folders the walk
skipped), or past its budget; and, in a worktree card, the refs of the other `kanban/*`
branches and its own reflog swapped for a symlink. Each is planted from inside the real
sandbox (the card's policy, bwrap, git); then the user's own git runs on the host, where a
planted hook, config or link would act with the user's rights.
"""

from __future__ import annotations

import os
import subprocess
import threading
from contextlib import suppress
from functools import partial
from pathlib import Path

import pytest

from kanban.state.config import Profile
from kanban.state.errors import ConfigError
from kanban.tools import gitwall, worktree_refs
from kanban.tools.runner import CommandSpec
from kanban.tools.sandbox_runner import BwrapRunner
from kanban.worker.sandboxing import card_policy
from kanban.workspaces import Workspace
from tests.security.test_git_hardening import git, made, repository
from tests.support.procs import wait_until

pytestmark = pytest.mark.usefixtures("sandboxed")
USER = ("-c", "user.name=u", "-c", "user.email=u@u")


def in_sandbox(workspace: Path, board: Path, command: str,
               checkout: Workspace | None = None) -> str:
    """`command`'s output, run behind the wall of a card working in `workspace`."""
    policy = card_policy(Profile(), network=False, workspace=workspace, home=board,
                         checkout=checkout)
    out = board.parent / "sandbox-output"
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "GIT_CONFIG_NOSYSTEM": "1"}
    BwrapRunner(policy, session=False).run(CommandSpec.shell(
        command, cwd=workspace, env=env, timeout_s=60, output_path=out))
    return out.read_text()


def run_in(box: BwrapRunner, workspace: Path, command: str) -> str:
    """`command`'s output, run by `box` (its sandbox kept for the next command)."""
    out = workspace.parent / f"{workspace.name}-output"
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "GIT_CONFIG_NOSYSTEM": "1"}
    box.run(CommandSpec.shell(command, cwd=workspace, env=env, timeout_s=60, output_path=out))
    return out.read_text()


def plant(repo: str, marker: Path) -> str:
    """Code for the user's next commit or status in `repo`, three ways."""
    return (f"printf '#!/bin/sh\\ntouch {marker}\\ncat\\n' > evil.sh; chmod +x evil.sh; "
            f"cp evil.sh {repo}/.git/hooks/pre-commit; echo hook=$?; "
            f'git -C {repo} config core.fsmonitor "$PWD/evil.sh"; echo fsmonitor=$?; '
            f'git -C {repo} config alias.st "!$PWD/evil.sh"; echo alias=$?; '
            f"mv {repo}/.git {repo}/.git-old; echo moved=$?; "
            f"mv {repo.split('/')[0]} aside; echo aside=$?; "
            f"mv {repo} {repo}-old && git init -q {repo}; echo replaced=$?; "
            f"echo work > {repo}/work.txt")


def user_commits(repo: Path) -> None:
    """The user's next git commands there, on the host (`st`: an alias they might have)."""
    git("add", "-A", cwd=repo)
    git(*USER, "commit", "-qm", "user", cwd=repo)
    git("status", cwd=repo)
    subprocess.run(["git", "st"], cwd=repo, capture_output=True, check=False,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"})


@pytest.fixture
def board(tmp_path: Path) -> Path:
    """The board's folder (hidden in the sandbox: a marker there was made on the host)."""
    folder = tmp_path / "board"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("where", ["a/b/c/d/e/deep", ".venv/src/pkg", "build/vendor/x",
                                   "node_modules/dep"])
def test_a_repository_the_walk_used_to_skip_keeps_its_git_folder(
        tmp_path: Path, board: Path, where: str) -> None:
    """`dir:~/project` with a repository six folders down, an editable install from git in
    `.venv/src/`, a vendored checkout in `build/`, a git dependency in `node_modules`; the
    repository itself, or a folder above it, moved aside for one the card made."""
    workspace = tmp_path / "project"
    repo = workspace / where
    repo.parent.mkdir(parents=True)
    repository(repo)
    config = (repo / ".git" / "config").read_text()
    marker = board / "planted-code-ran"
    out = in_sandbox(workspace, board, plant(where, marker))
    for name in ("hook", "fsmonitor", "alias", "moved", "aside", "replaced"):
        assert f"{name}=0" not in out, f"{name}: {out}"
    assert (repo / "work.txt").read_text() == "work\n"  # the card's work is there
    user_commits(repo)
    assert (repo / ".git" / "config").read_text() == config
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert not marker.exists()


def test_a_tree_past_the_walks_budget_is_refused_not_left_half_seen(
        tmp_path: Path, board: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository the walk would reach only after its budget (lowered here from 500,000
    entries): the card does not run at all, and says which folder and what to change."""
    monkeypatch.setattr(gitwall, "NESTED_ENTRIES", 50)
    workspace = tmp_path / "project"
    (workspace / "data").mkdir(parents=True)
    for name in range(60):
        (workspace / f"file{name}").write_text("")
    repo = workspace / "zz" / "repo"
    repo.parent.mkdir()
    repository(repo)
    marker = board / "planted-code-ran"
    with pytest.raises(ConfigError) as refused:
        in_sandbox(workspace, board, plant("zz/repo", marker))
    assert f"workspace {workspace} holds more than 50 files and folders" in str(refused.value)
    assert "give the card a smaller folder as its workspace (dir:PATH)" in str(refused.value)
    (repo / "README").write_text("the user's change\n")
    user_commits(repo)
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert not marker.exists()


def worktree_card(tmp_path: Path) -> tuple[Workspace, Path, Path]:
    """Card 7's worktree (the dispatcher's own step), beside card 8's branch."""
    repo = repository(tmp_path / "repo")
    ws, home = made(repo, 7)
    git("branch", "kanban/8", cwd=repo)
    return ws, home, repo


def test_a_worktree_card_cannot_move_or_remove_another_cards_branch(tmp_path: Path) -> None:
    ws, home, repo = worktree_card(tmp_path)
    common = repo / ".git"
    sibling = git("rev-parse", "kanban/8", cwd=repo)
    sibling_log = (common / "logs/refs/heads/kanban/8").read_text()
    out = in_sandbox(ws.path, home, (
        "C=$(git rev-parse --git-common-dir); K=$C/refs/heads/kanban; "
        "echo own > own.txt && git add own.txt && "
        "git -c user.name=m -c user.email=m@m commit -qm own; echo commit=$?; "
        "git update-ref refs/heads/kanban/8 HEAD; echo update=$?; "
        "git branch -f kanban/8 HEAD; echo branch=$?; "
        "git rev-parse HEAD > $K/8; echo write=$?; "
        "rm -f $K/8; echo rm=$?; mv $K/8 $K/gone; echo mv=$?; "
        "echo x >> $C/logs/refs/heads/kanban/8; echo log=$?"), ws)
    assert "commit=0" in out, out  # its own branch: lock, rename, reflog
    for name in ("update", "branch", "mv", "log"):
        assert f"{name}=0" not in out, f"{name}: {out}"
    # `write` and `rm` act in the folder its sandbox sees there, which holds its own branch
    # alone (kanban.tools.worktree_refs.BranchMirror): the repository's kanban/8 is untouched
    assert git("rev-parse", "kanban/8", cwd=repo) == sibling
    assert (common / "logs/refs/heads/kanban/8").read_text() == sibling_log
    assert not (common / "refs/heads/kanban/gone").exists()
    assert git("log", "-1", "--format=%s", "kanban/7", cwd=repo) == "own"  # published


def test_a_branch_made_after_the_cards_sandbox_started_is_out_of_its_reach(
        tmp_path: Path) -> None:
    """Card 9 starts while card 7's sandbox (kept for all of card 7's commands) runs: no
    read-only bind made when card 7's sandbox started could cover card 9's new branch."""
    ws, home, repo = worktree_card(tmp_path)
    box = BwrapRunner(card_policy(Profile(), network=False, workspace=ws.path, home=home,
                                  checkout=ws))
    run = partial(run_in, box, ws.path)

    try:
        run("true")
        assert box._session is not None and not box._session.dead  # up before card 9
        git("branch", "kanban/9", cwd=repo)
        nine = git("rev-parse", "kanban/9", cwd=repo)
        said = run("K=$(git rev-parse --git-common-dir)/refs/heads/kanban; "
                   "echo own > own.txt && git add own.txt && "
                   "git -c user.name=m -c user.email=m@m commit -qm own; echo commit=$?; "
                   "echo seen $(ls $K); git rev-parse HEAD > $K/9; "
                   "git update-ref refs/heads/kanban/9 HEAD; git branch -f kanban/9 HEAD")
        assert box._session is not None and not box._session.dead  # the same sandbox
    finally:
        box.close()
    assert "commit=0" in said and "seen 7\n" in said, said  # its own branch alone
    assert git("rev-parse", "kanban/9", cwd=repo) == nine
    assert git("log", "-1", "--format=%s", "kanban/7", cwd=repo) == "own"


def test_a_worktree_cards_reflog_cannot_become_a_link_out(tmp_path: Path) -> None:
    """A reflog swapped for a symlink: git appends through it, so the user's next update
    of the branch on the host would write wherever it points."""
    ws, home, repo = worktree_card(tmp_path)
    victim = tmp_path / "victim"  # outside the sandbox's view: a link there dangles inside
    victim.write_text("the user's file\n")
    reflog = repo / ".git" / "logs" / "refs" / "heads" / "kanban" / "7"
    out = in_sandbox(ws.path, home, (
        "L=$(git rev-parse --git-common-dir)/logs/refs/heads/kanban/7; "
        f"ln -sf {victim} $L; echo link=$?; "
        f"ln -s {victim} $L.new; mv -f $L.new $L; echo moved=$?; "
        f"rm -f $L; echo rm=$?; ln -s {victim} $L; echo relink=$?; "
        "echo own > own.txt && git add own.txt && "
        "git -c user.name=m -c user.email=m@m commit -qm own; echo commit=$?"), ws)
    for name in ("link", "moved", "rm", "relink"):
        assert f"{name}=0" not in out, f"{name}: {out}"
    assert "commit=0" in out, out
    git("update-ref", "-m", "user", "refs/heads/kanban/7", "kanban/7~1", cwd=repo)  # on the host
    assert victim.read_text() == "the user's file\n"
    assert not reflog.is_symlink() and "commit: own" in reflog.read_text()


@pytest.mark.parametrize("how", ["printf 'ref: refs/heads/main\\n' > $K/7",
                                 "ln -sfn refs/heads/main $K/7"])
def test_a_worktree_cards_branch_made_symbolic_is_made_plain_when_it_ends(
        tmp_path: Path, how: str) -> None:
    """The card's own ref is its to write; written as a symbolic ref to `main`, the card's
    closing commit and the user's next commits on the card's branch would move `main`."""
    from kanban.tools import worktree

    ws, home, repo = worktree_card(tmp_path)
    main = git("rev-parse", "main", cwd=repo)
    policy = card_policy(Profile(), network=False, workspace=ws.path, home=home, checkout=ws)
    box = BwrapRunner(policy, session=False)
    out = tmp_path / "sandbox-output"
    box.run(CommandSpec.shell(
        "K=$(git rev-parse --git-common-dir)/refs/heads/kanban; "
        f"{how}; echo planted=$?; echo work > work.txt", cwd=ws.path, timeout_s=60,
        env={"PATH": os.environ["PATH"], "HOME": "/tmp"}, output_path=out))
    assert "planted=0" in out.read_text(), out.read_text()
    ref = repo / ".git/refs/heads/kanban/7"
    assert not ref.is_symlink() and not ref.read_text().startswith("ref:")  # never copied out
    mirror = worktree_refs.branch_mirror(home, ws.git, "kanban/7")  # type: ignore[arg-type]
    assert mirror is not None
    seen = mirror.folder / "7"
    assert seen.is_symlink() or seen.read_text().startswith("ref:")  # as the card's git sees it
    note = worktree.finish(ws, "kanban #7: card", wrap=box.wrap, mirror=mirror)
    assert "branch kanban/7" in note, note
    assert not seen.is_symlink() and not seen.read_text().startswith("ref:")
    assert not ref.is_symlink() and not ref.read_text().startswith("ref:")
    assert git("rev-parse", "main", cwd=repo) == main  # the card's commit went to its branch
    (ws.path / "user.txt").write_text("user\n")
    git("add", "user.txt", cwd=ws.path)
    git(*USER, "commit", "-qm", "user", cwd=ws.path)  # the user, on the host, on kanban/7
    assert git("rev-parse", "main", cwd=repo) == main
    assert git("log", "-1", "--format=%s", "kanban/7", cwd=repo) == "user"


def test_a_branch_planted_for_a_future_card_is_never_checked_out(tmp_path: Path) -> None:
    """Card 7 makes `kanban/9` (the branch folder is its to write: its own ref's lock and
    rename live there) at a commit of its own, with a Makefile. When card 9 comes, perhaps
    with more rights, it must not start on that branch and run what is planted."""
    from kanban.tools import worktree

    ws, home, repo = worktree_card(tmp_path)
    out = in_sandbox(ws.path, home, (
        "printf 'all:\\n\\ttouch /tmp/planted\\n' > Makefile && git add Makefile && "
        "git -c user.name=m -c user.email=m@m commit -qm planted; echo commit=$?; "
        "git rev-parse HEAD > $(git rev-parse --git-common-dir)/refs/heads/kanban/9; "
        "echo planted=$?"), ws)
    assert "planted=0" in out, out  # in the folder its sandbox sees, which is its own
    missing = subprocess.run(["git", "rev-parse", "--verify", "-q", "refs/heads/kanban/9"],
                             cwd=repo, capture_output=True, text=True)
    assert missing.returncode != 0, missing.stdout  # never in the repository
    future = worktree.prepare(
        Workspace(9, "worktree", home / "workspaces" / "default" / "9", "kanban/9"), home)
    assert not (future.path / "Makefile").exists()  # card 9 starts from HEAD
    # without the sandbox's own folder (a card with sandbox = "off" writes the
    # repository's), a branch made so is refused, not checked out
    plain = subprocess.run(["git", "branch", "kanban/11", "kanban/7"], cwd=repo)
    assert plain.returncode == 0
    with pytest.raises(worktree.WorktreeError, match="kanban/11 already exists .* did not"):
        worktree.prepare(
            Workspace(11, "worktree", home / "workspaces" / "default" / "11", "kanban/11"),
            home)


def test_a_removed_cards_branch_is_checked_out_again_as_it_was_left(tmp_path: Path) -> None:
    """`kanban gc` removes a finished card's worktree and keeps its branch: opened again,
    the card gets its own branch back, and not once the branch was moved meanwhile."""
    from kanban.tools import worktree
    from kanban.tools.worktree_lifecycle import remove_checkout

    ws, home, repo = worktree_card(tmp_path)
    (ws.path / "result.txt").write_text("the card's work\n")
    worktree.finish(ws, "kanban #7: card")
    left = git("rev-parse", "kanban/7", cwd=repo)
    assert remove_checkout(home, ws.path) and not ws.path.exists()
    again = worktree.prepare(Workspace(7, "worktree", ws.path, "kanban/7"), home)
    assert (again.path / "result.txt").read_text() == "the card's work\n"
    assert git("rev-parse", "HEAD", cwd=again.path) == left
    remove_checkout(home, again.path)
    git("update-ref", "refs/heads/kanban/7", "main", cwd=repo)  # moved while it was away
    with pytest.raises(worktree.WorktreeError, match="kanban/7 already exists"):
        worktree.prepare(Workspace(7, "worktree", ws.path, "kanban/7"), home)


def test_a_lock_planted_on_a_future_cards_branch_does_not_fail_its_checkout(
        tmp_path: Path) -> None:
    """`kanban/9.lock`, made by card 7's commands, would make git refuse to create card
    9's branch (and fail the card). Card 9 has not started: nothing else writes its
    branch, so the lock goes."""
    from kanban.tools import worktree

    ws, home, repo = worktree_card(tmp_path)
    out = in_sandbox(ws.path, home, (
        "K=$(git rev-parse --git-common-dir)/refs/heads/kanban; "
        "touch $K/9.lock; echo lock=$?; mkdir $K/10.lock; echo dir=$?"), ws)
    assert "lock=0" in out and "dir=0" in out, out  # in its own folder: none reaches the repo
    assert not (repo / ".git/refs/heads/kanban/9.lock").exists()
    assert not (repo / ".git/refs/heads/kanban/10.lock").exists()
    # a card with sandbox = "off" writes the repository's folder itself
    (repo / ".git/refs/heads/kanban/9.lock").touch()
    (repo / ".git/refs/heads/kanban/10.lock").mkdir()
    future = worktree.prepare(Workspace(9, "worktree", home / "workspaces" / "default" / "9",
                                        "kanban/9"), home)
    assert future.path.is_dir() and git("rev-parse", "kanban/9", cwd=repo)
    assert not (repo / ".git/refs/heads/kanban/9.lock").exists()
    with pytest.raises(worktree.WorktreeError, match="not a lock file"):  # left to a person
        worktree.prepare(Workspace(10, "worktree", home / "workspaces" / "default" / "10",
                                   "kanban/10"), home)
    assert (repo / ".git/refs/heads/kanban/10.lock").is_dir()


def test_a_lock_swapped_for_a_folder_while_it_is_cleared_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race a card running beside the dispatcher could win: the lock is a file when
    looked at and a folder when removed. The card fails with a clear reason; nothing in
    the dispatcher trips on an OSError."""
    from kanban.tools import worktree

    ws, home, repo = worktree_card(tmp_path)
    lock = repo / ".git/refs/heads/kanban/9.lock"
    lock.write_text("")
    real_unlink = Path.unlink

    def swapped(self: Path, missing_ok: bool = False) -> None:
        if self == lock:
            real_unlink(self)
            self.mkdir()  # the swap, between the look and the removal
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", swapped)
    with pytest.raises(worktree.WorktreeError, match="cannot remove"):
        worktree.prepare(Workspace(9, "worktree", home / "workspaces" / "default" / "9",
                                   "kanban/9"), home)


def test_removing_a_cards_worktree_removes_its_own_refs_folder(tmp_path: Path) -> None:
    """`kanban gc` removes a finished card's worktree; the folder its sandbox saw its
    branch's ref in goes with it (the branch stays in the repository)."""
    from kanban.tools.worktree_lifecycle import remove_checkout

    ws, home, repo = worktree_card(tmp_path)
    in_sandbox(ws.path, home, "true", ws)
    mirror = worktree_refs.branch_mirror(home, ws.git, "kanban/7")  # type: ignore[arg-type]
    assert mirror is not None and (mirror.folder / "7").is_file()
    tip = git("rev-parse", "kanban/7", cwd=repo)
    assert remove_checkout(home, ws.path)
    assert not mirror.folder.exists() and list(mirror.folder.parent.iterdir()) == []
    assert git("rev-parse", "kanban/7", cwd=repo) == tip


def test_the_user_moving_the_branch_while_the_card_runs_is_kept(tmp_path: Path) -> None:
    """The card's commands copy out only what the card changed: a branch the user reset on
    the host meanwhile is not set back by the card's next command, and the card's next
    run starts where the user left it."""
    ws, home, repo = worktree_card(tmp_path)
    box = BwrapRunner(card_policy(Profile(), network=False, workspace=ws.path, home=home,
                                  checkout=ws))
    run = partial(run_in, box, ws.path)

    try:
        run("echo one > one.txt && git add one.txt && "
            "git -c user.name=m -c user.email=m@m commit -qm one")
        assert git("log", "-1", "--format=%s", "kanban/7", cwd=repo) == "one"
        git("update-ref", "refs/heads/kanban/7", "main", cwd=repo)  # the user, on the host
        main = git("rev-parse", "main", cwd=repo)
        run("git status --short")  # a command that commits nothing
        assert git("rev-parse", "kanban/7", cwd=repo) == main
    finally:
        box.close()
    assert git("rev-parse", "kanban/7", cwd=repo) == main
    assert in_sandbox(ws.path, home, "git rev-parse kanban/7", ws).strip() == main


def test_a_card_sharing_the_branch_keeps_its_commit_when_another_starts(
        tmp_path: Path) -> None:
    """Children working in their parent's worktree share its branch and its refs folder:
    one starting while another's command has just committed (not copied out yet) must not
    lose that commit."""
    ws, home, repo = worktree_card(tmp_path)
    hold = ws.path / "hold.fifo"  # in the workspace: the sandbox sees it
    os.mkfifo(hold)
    first = card_policy(Profile(), network=False, workspace=ws.path, home=home, checkout=ws)
    box = BwrapRunner(first, session=False)
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "GIT_CONFIG_NOSYSTEM": "1"}
    committed = ws.path / "committed"
    command = threading.Thread(target=lambda: box.run(CommandSpec.shell(
        "echo a > a.txt && git add a.txt && git -c user.name=m -c user.email=m@m commit -qm "
        f"first && git rev-parse HEAD > {committed}.tmp && mv {committed}.tmp {committed}; "
        f"read line < {hold}", cwd=ws.path, env=env, timeout_s=60,
        output_path=tmp_path / "out-first")))
    command.start()
    try:
        wait_until(committed.exists, timeout=30, what="the first card's commit")
        commit = committed.read_text().strip()
        assert git("log", "-1", "--format=%s", "kanban/7", cwd=repo) != "first"  # not out yet
        card_policy(Profile(), network=False, workspace=ws.path, home=home, checkout=ws)
        assert git("rev-parse", "kanban/7", cwd=repo) == commit  # copied out, not dropped
    finally:
        with suppress(OSError):  # ENXIO: the command is not waiting (it failed early)
            os.close(os.open(hold, os.O_WRONLY | os.O_NONBLOCK))
        command.join(60)
    assert git("rev-parse", "kanban/7", cwd=repo) == commit


@pytest.mark.parametrize("how", ["rm -f $K/7 && mkfifo $K/7", "echo deadbeef > $K/7",
                                 "head -c 100000 /dev/zero > $K/7", "rm -f $K/7 && mkdir $K/7"])
def test_a_ref_the_card_made_unreadable_is_not_copied_out(
        tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]) -> None:
    """What kanban copies to the repository is a commit id in a plain file: a FIFO (which
    would hold the worker), a short or huge value, a folder are refused, and said."""
    ws, home, repo = worktree_card(tmp_path)
    tip = git("rev-parse", "kanban/7", cwd=repo)
    out = in_sandbox(ws.path, home, f"K=$(git rev-parse --git-common-dir)/refs/heads/kanban; "
                                    f"{how}; echo planted=$?", ws)
    assert "planted=0" in out, out
    assert git("rev-parse", "kanban/7", cwd=repo) == tip
    assert "branch kanban/7 not updated from the card's sandbox" in capsys.readouterr().err
