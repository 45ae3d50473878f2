"""Attacks that plant something for later, where it runs with more rights than the card:
code in the Python the worker itself runs on (a project's `.venv` inside a `dir:`
workspace: the next `kanban` command or cold worker imports it, outside every sandbox),
and hooks or config in repositories nested in a `dir:` workspace (the user's next commit
there runs them).

Commands see that venv read-only (the sandbox binds the worker's interpreter); the file
tools, which run in the worker, must hold the same wall.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.conftest import Attack, Call, replayer
from tests.security.test_git_attacks import evil_script, git, guarded, make_repository, sh
from tests.support.llm_server import LLMServer

pytestmark = pytest.mark.usefixtures("sandboxed")
PROFILE = """toolsets = ["kanban", "file", "terminal"]
approval = "allow"
sandbox = "required"
max_turns = 40"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A Python project with its own venv (kanban installed in it) and its board inside."""
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "app.py").write_text("print('hello')\n")
    venv = folder / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    ours = next(p for p in sys.path if p.endswith("site-packages"))
    (site_packages(venv) / "ours.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return folder


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python*/site-packages"))


def dispatch_from(python: Path, attack: Attack, card: int, calls: list[Call]) -> list[str]:
    """`kanban dispatch --once` run by `python` (its workers run on it too)."""
    seen: list[str] = []
    with LLMServer(responder=replayer(calls, seen)) as server:
        subprocess.run([str(python), "-m", "kanban.cli.app", "--db", str(attack.board.path),
                        "dispatch", "--once"], env=attack.canaries.env(server),
                       capture_output=True, timeout=300, check=False)
    return seen


def test_the_file_tools_cannot_plant_code_in_the_workers_own_venv(
        project_attack: Attack, project: Path, tmp_path: Path) -> None:
    attack = project_attack
    venv = project / ".venv"
    site = site_packages(venv).relative_to(project)
    marker = tmp_path / "planted-code-ran"  # /tmp is private in the sandbox: host only
    payload = f"import os; open({str(marker)!r}, 'w').close()\n"
    before = {p: p.read_bytes() for p in venv.rglob("*") if p.is_file()}
    attack.configure(PROFILE)
    card = attack.board.add("plant", profile=attack.profile, workspace=f"dir:{project}")
    seen = dispatch_from(venv / "bin" / "python", attack, card, [
        ("write_file", {"path": f"{site}/zz-planted.pth", "content": payload}),
        ("edit_file", {"path": f"{site}/ours.pth", "old": "import site",
                       "new": payload.strip() + "; import site"}),
        ("write_file", {"path": f"{site}/new/sitecustomize.py", "content": payload}),
        ("write_file", {"path": ".venv/pyvenv.cfg", "content": "home = /tmp\n"}),
        ("terminal", {"command": f"ln -s {site} sp; ln -s .venv/pyvenv.cfg cfg; "
                                 f"echo '{payload.strip()}' > {site}/zz-shell.pth; "
                                 "echo shell=$?"}),
        ("write_file", {"path": "sp/zz-linked.pth", "content": payload}),
        ("edit_file", {"path": "cfg", "old": "home", "new": "home"}),
        ("write_file", {"path": "src/app.py", "content": "print('changed')\n"}),
    ])
    status, error = attack.card(card)
    assert status == "done", (status, error, seen)
    assert [r.startswith("Error:") for r in seen] == [True] * 4 + [False] + [True] * 2 \
        + [False], seen
    assert "shell=0" not in seen[4], seen[4]
    assert (project / "src" / "app.py").read_text() == "print('changed')\n"  # the card's
    after = {p: p.read_bytes() for p in venv.rglob("*") if p.is_file()}
    assert after == before
    subprocess.run([str(venv / "bin" / "python"), "-c", "pass"], check=True, timeout=60)
    assert not marker.exists()
    attack.assert_contained()


def test_repositories_nested_in_a_dir_workspace_keep_their_git_folders(
        attack: Attack, tmp_path: Path) -> None:
    """`dir:~/src` holding clones side by side: hooks and config planted in one of them
    would run the next time the user commits there (as the top repository's would)."""
    src = tmp_path / "src"
    (src / "group").mkdir(parents=True)
    repos = [src / "app", src / "group" / "tool"]
    commons = []
    for repo in repos:
        repo.mkdir()
        commons.append(make_repository(repo))
    before = [guarded(common) for common in commons]
    marker = attack.board.home / "nested-ran"  # the board's folder: hidden in the sandbox
    attack.configure(PROFILE)
    calls: list[Call] = [evil_script("evil.sh", marker), sh("chmod +x evil.sh")]
    for name in ("app", "group/tool"):
        calls += [sh(f"cp evil.sh {name}/.git/hooks/post-commit; echo hook=$?"),
                  sh(f'git -C {name} config core.fsmonitor "$PWD/evil.sh"; echo config=$?'),
                  sh(f"mv {name}/.git {name}/.git-old; echo moved=$?"),
                  ("write_file", {"path": f"{name}/.git/hooks/post-checkout",
                                  "content": "#!/bin/sh\n"}),
                  ("write_file", {"path": f"{name}/work.txt", "content": "work\n"})]
    card, seen = attack.run(calls, workspace=f"dir:{src}")
    assert attack.card(card)[0] == "done", (attack.card(card), seen)
    out = "".join(seen)
    for name in ("hook", "config", "moved"):
        assert f"{name}=0" not in out, f"{name}: {out}"
    for repo, common, was in zip(repos, commons, before, strict=True):
        assert (repo / "work.txt").read_text() == "work\n"  # the card's work is there
        git("add", "-A", cwd=repo)
        git("-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "user", cwd=repo)
        git("status", cwd=repo)
        after = guarded(common)
        del after["refs/heads/main"], was["refs/heads/main"]  # the user's own commit
        assert after == was
        git("checkout", "-q", "-b", "other", cwd=repo)
    assert not marker.exists()
    attack.assert_contained()
