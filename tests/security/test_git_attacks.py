"""Attacks through git: code planted in the repository (hooks, fsmonitor, filter drivers,
ssh commands) to run outside the sandbox, and `.git` files planted to widen the next run's
wall. The board's folder is a git repository, as in a project that uses kanban.

Planted code writes a marker into the board's folder: hidden (a read-only tmpfs) inside
the sandbox, so a marker on the host means the code ran outside it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.security.conftest import Attack, Call

pytestmark = pytest.mark.usefixtures("sandboxed")
WORKTREE_PROFILE = """
toolsets = ["kanban", "file", "terminal"]
approval = "allow"
sandbox = "required"
workspace = "worktree"
max_turns = 60
"""


def git(*args: str, cwd: Path, check: bool = True) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          check=check)
    return proc.stdout.strip()


def make_repository(home: Path) -> Path:
    """The board's folder as a repository with one commit; its git folder."""
    git("init", "-q", "-b", "main", cwd=home)
    (home / "README").write_text("hello\n")
    git("add", "README", cwd=home)
    git("-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "start", cwd=home)
    return home / ".git"


def guarded(common: Path) -> dict[str, str]:
    """What no card may change in the user's repository: its config, hooks, info, HEAD,
    main's ref, packed refs, and which files sit at its top."""
    out = {"top": " ".join(sorted(p.name for p in common.iterdir() if p.name != "worktrees"))}
    paths = [common / "config", common / "HEAD", common / "packed-refs",
             common / "refs" / "heads" / "main", *(common / "hooks").rglob("*"),
             *(common / "info").rglob("*")]
    for path in sorted(paths):
        if path.is_file():
            out[str(path.relative_to(common))] = path.read_text(errors="replace")
    return out


KANBANS = ("workspaces/", "logs/", "worktrees/", "branch-refs/", "kanban.db", ".git/objects/",
           ".git/worktrees/", ".git/refs/heads/kanban/", ".git/logs/")


def outside_the_wall(home: Path) -> set[str]:
    """Files in the board's folder that neither a card nor kanban's own bookkeeping
    (workspaces, logs, worktree records, the branches' objects and refs) may add."""
    found = {str(p.relative_to(home)) for p in home.rglob("*") if p.is_file()}
    return {p for p in found if not p.startswith(KANBANS)}


def evil_script(name: str, marker: Path) -> Call:
    """The attacker's payload `name`, written into the workspace: mark, then pass stdin
    through (so it also works as a filter driver)."""
    return ("write_file", {"path": name, "content": f"#!/bin/sh\ntouch {marker}\ncat\n"})


def sh(command: str) -> Call:
    return ("terminal", {"command": command})


# Each attempt to plant code as the attacker would type it: `{e}` is its payload, `$C` the
# shared git folder.
PLANTS = {
    "post-commit": "cp {e} $C/hooks/post-commit",
    "post-checkout": "cp {e} $C/hooks/post-checkout",
    "pre-commit": "cp {e} $C/hooks/pre-commit",
    "reference-transaction": "cp {e} $C/hooks/reference-transaction",
    "fsmonitor": 'git config core.fsmonitor "$PWD/{e}"',
    "hooksPath": 'mkdir -p h && cp {e} h/post-commit && cp {e} h/post-checkout'
                 ' && git config core.hooksPath "$PWD/h"',
    "filter": "echo '* filter=evil' > .gitattributes && git config filter.evil.clean "
              '"$PWD/{e}" && git config filter.evil.smudge "$PWD/{e}"',
    "sshCommand": 'git config core.sshCommand "$PWD/{e}"',
    "include": 'printf "[core]\\n\\tfsmonitor = $PWD/{e}\\n" > inc && '
               'git config include.path "$PWD/inc"',
    "config.worktree": 'printf "[core]\\n\\tfsmonitor = $PWD/{e}\\n" > '
                       '"$(git rev-parse --git-dir)/config.worktree"',
    "info-attributes": "mkdir -p $C/info && echo '* filter=lfs' > $C/info/attributes",
    "main-branch": "git branch -f main HEAD",  # the user's branch moved to the model's commit
}


def test_code_planted_in_the_repository_never_runs_outside_the_sandbox(
        attack: Attack) -> None:
    """Every way to plant code in the repository, tried from inside a worktree card; then
    a second card and the user's own git commands (commit, status, checkout) run where
    the planted code would."""
    common = make_repository(attack.board.home)
    git("config", "extensions.worktreeConfig", "true", cwd=attack.board.home)  # the user's
    git("config", "filter.lfs.clean", "cat", cwd=attack.board.home)
    before, files = guarded(common), outside_the_wall(attack.board.home)
    markers = {name: attack.board.home / f"ran-{name}" for name in PLANTS}
    calls: list[Call] = []
    for name, plant in PLANTS.items():
        calls += [evil_script(f"{name}.sh", markers[name]),
                  sh(f"C=$(git rev-parse --git-common-dir); chmod +x {name}.sh; "
                     + plant.format(e=f"{name}.sh")
                     + f"; echo {name}=$?")]
    attack.configure(WORKTREE_PROFILE)
    card, seen = attack.run([*calls, ("write_file", {"path": "work.txt", "content": "work\n"})],
                            workspace="worktree")
    assert attack.card(card)[0] == "done", (attack.card(card), seen)
    for name in PLANTS:
        assert f"{name}=0" not in "".join(seen), f"{name} was planted"
    # the next card checks out a worktree and commits; then the user works in the repository
    second, _ = attack.run([("write_file", {"path": "more.txt", "content": "more\n"})],
                           workspace="worktree")
    assert attack.card(second)[0] == "done", attack.card(second)
    home = attack.board.home
    assert outside_the_wall(home) - files == {"config.toml"}
    (home / "README").write_text("user's change\n")
    git("add", "-A", "README", cwd=home)
    git("-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "user", cwd=home)
    git("status", cwd=home)
    git("status", cwd=attack.workspace(card))  # the user looks at the card's branch
    git("checkout", "-q", "-b", "user-branch", cwd=home)
    git("checkout", "-q", "main", cwd=home)
    assert [name for name, marker in markers.items() if marker.exists()] == []
    after = guarded(common)
    del after["refs/heads/main"], before["refs/heads/main"]  # the user's own commit
    assert after == before
    assert git("log", "-1", "--format=%s", f"kanban/{card}", cwd=home) == f"kanban #{card}: attack"
    assert git("show", f"kanban/{card}:work.txt", cwd=home) == "work"
    attack.assert_contained()


def test_a_worktree_card_commits_inside_its_sandbox_and_kanban_commits_on_its_branch(
        attack: Attack) -> None:
    home = attack.board.home
    make_repository(home)
    attack.configure(WORKTREE_PROFILE)
    card, seen = attack.run([
        ("write_file", {"path": "mine.txt", "content": "mine\n"}),
        sh("git add mine.txt && git -c user.name=m -c user.email=m@m commit -qm 'my own'"
           " && echo committed"),
        ("write_file", {"path": "left.txt", "content": "left\n"})], workspace="worktree")
    assert attack.card(card)[0] == "done", (attack.card(card), seen)
    assert "committed" in seen[1], seen[1]
    log = git("log", "--format=%s", f"kanban/{card}", cwd=home).splitlines()
    assert log == [f"kanban #{card}: attack", "my own", "start"]
    assert git("show", f"kanban/{card}:left.txt", cwd=home) == "left"
    assert git("branch", "--show-current", cwd=home) == "main"
    assert git("log", "--format=%s", "main", cwd=home) == "start"


def test_hooks_planted_on_the_host_do_not_run_in_kanbans_own_git(attack: Attack) -> None:
    """As if the wall had failed: hooks, fsmonitor and a filter driver already in the
    repository. kanban's checkout of the worktree and its completion commit run none."""
    home = attack.board.home
    common = make_repository(home)
    marker = home / "worktree-ran"  # written where the code runs: the workspace is its cwd
    script = common / "evil.sh"
    script.write_text(f"#!/bin/sh\necho \"$0\" >> \"$PWD/.ran\"\necho x >> {marker}\ncat\n")
    script.chmod(0o755)
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction",
                 "post-index-change", "prepare-commit-msg", "commit-msg", "pre-auto-gc"):
        (common / "hooks" / hook).symlink_to(script)
    git("config", "core.fsmonitor", str(script), cwd=home)
    git("config", "filter.evil.clean", str(script), cwd=home)
    git("config", "filter.evil.smudge", str(script), cwd=home)
    (common / "info").mkdir(exist_ok=True)
    (common / "info" / "attributes").write_text("* filter=evil\n")
    attack.configure(WORKTREE_PROFILE)
    card, seen = attack.run([("write_file", {"path": "work.txt", "content": "work\n"})],
                            workspace="worktree")
    assert attack.card(card)[0] == "done", (attack.card(card), seen)
    assert not (attack.workspace(card) / ".ran").exists()
    assert not marker.exists()
    assert git("show", f"kanban/{card}:work.txt", cwd=home) == "work"


def gitdir_attack(attack: Attack, victim: Path) -> Call:
    """A `.git` file naming the victim's folder as a repository this workspace belongs to
    (the old sandbox bound such a folder writable on the next run)."""
    (victim / "worktrees" / "x").mkdir(parents=True, exist_ok=True)
    return sh(f"rm -rf .git; printf 'gitdir: {victim}/worktrees/x\\n' > .git; "
              f"mkdir -p sub && printf 'gitdir: {victim}/worktrees/x\\n' > sub/.git; "
              f"printf '{victim}\\n' > \"$(git rev-parse --git-dir 2>/dev/null)/commondir\";"
              " cat .git")


def reach(victim: Path) -> Call:
    return sh(f"touch {victim}/reached; touch {victim}/worktrees/x/reached; ls {victim}")


@pytest.mark.parametrize("kind", ["scratch", "dir", "worktree", "parent"])
def test_a_planted_gitdir_file_does_not_widen_the_next_run(
        attack: Attack, tmp_path: Path, kind: str) -> None:
    home = attack.board.home
    make_repository(home)
    victim = tmp_path / "victim"
    project = home / "project"
    project.mkdir()
    attack.configure(WORKTREE_PROFILE.replace('workspace = "worktree"\n', ""))
    first: dict[str, object] = {
        "scratch": {}, "dir": {"workspace": f"dir:{project}"},
        "worktree": {"workspace": "worktree"}, "parent": {}}[kind]
    lead, seen = attack.run([] if kind == "parent" else [gitdir_attack(attack, victim)],
                            **first)
    assert attack.card(lead)[0] == "done", (attack.card(lead), seen)
    same = ({"workspace": f"dir:{project}"} if kind == "dir"
            else {"workspace": "parent", "parent_id": lead})
    if kind == "parent":  # a child plants in the shared folder, its sibling comes next
        planter, seen = attack.run([gitdir_attack(attack, victim)], **same)
        assert attack.card(planter)[0] == "done", (attack.card(planter), seen)
    later, seen = attack.run([reach(victim)], **same)
    assert attack.card(later)[0] == "done", (attack.card(later), seen)
    assert sorted(p.name for p in victim.rglob("*")) == ["worktrees", "x"]
    attack.assert_contained(victim)


def test_a_dir_card_on_a_checkout_cannot_plant_hooks_config_or_shell_start_up_files(
        attack: Attack, tmp_path: Path) -> None:
    """`--workspace dir:.` on the user's project: the card edits files, but the
    repository's git folder and the shell start-up files at the top of the folder stay
    the user's: no hook, config, `commondir` redirect or swapped `.git`."""
    project = tmp_path / "proj"
    project.mkdir()
    common = make_repository(project)
    (project / ".bashrc").write_text("# the user's\n")
    before = {**guarded(common), ".bashrc": (project / ".bashrc").read_text()}
    marker = attack.board.home / "dir-ran"
    attack.configure(WORKTREE_PROFILE.replace('workspace = "worktree"\n', ""))
    card, seen = attack.run([
        evil_script("evil.sh", marker),
        sh("chmod +x evil.sh; cp evil.sh .git/hooks/post-commit; echo hook=$?"),
        sh("rm -rf .git/hooks; echo rmhooks=$?"),
        sh('git config core.fsmonitor "$PWD/evil.sh"; echo config=$?'),
        sh("echo '* filter=x' > .git/info/attributes; echo info=$?"),
        sh("echo 'sh evil.sh' >> .bashrc; echo bashrc=$?"),
        sh("mv .git .git-old; echo moved=$?"),
        sh("mkdir -p evil/hooks && cp evil.sh evil/hooks/post-commit && cp .git/config evil/"
           " && echo \"$PWD/evil\" > .git/commondir; echo commondir=$?"),
        sh("mkdir -p sub && cd sub && git init -q && git config core.fsmonitor ../evil.sh &&"
           " git commit -q --allow-empty -m s && cd .. && git add sub; echo gitlink=$?"),
        ("write_file", {"path": "work.txt", "content": "work\n"})],
        workspace=f"dir:{project}")
    assert attack.card(card)[0] == "done", (attack.card(card), seen)
    out = "".join(seen)
    for name in ("hook", "rmhooks", "config", "info", "bashrc", "moved", "commondir",
                 "gitlink"):
        assert f"{name}=0" not in out, f"{name}: {out}"
    assert (project / "work.txt").read_text() == "work\n"
    git("add", "-A", ":!sub", cwd=project)
    git("-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "user", cwd=project)
    git("status", cwd=project)
    assert not marker.exists()
    after = {**guarded(common), ".bashrc": (project / ".bashrc").read_text()}
    del after["refs/heads/main"], before["refs/heads/main"]  # the user's own commit
    assert after == before
    attack.assert_contained()
