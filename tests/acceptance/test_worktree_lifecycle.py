"""A worktree card's checkout through the real CLI: `kanban workspace` says whether its branch
is merged, `--remove`, `archive` and `gc` take the checkout away and keep the branch, and a
worktree card outside a git repository is refused when added (issue 29, item 9)."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from kanban.state import DbLocation, open_database
from tests.support.procs import kanban
from tests.support.web import start_web


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def call(tool: str, /, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A repository on main with a kanban board in it whose coder works in worktrees."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "app.py").write_text("print('v1')\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v1", cwd=repo)
    db = repo / ".kanban" / "kanban.db"
    kanban(db, "init")
    spec = tmp_path / "coder.json"
    spec.write_text(json.dumps([call("write_file", path="NOTES.md", content="done\n"),
                                call("kanban_complete", summary="wrote notes")] * 3))
    (db.parent / "config.toml").write_text(
        f'[profiles.coder]\nmodel = "scripted:{spec}"\ntoolsets = ["kanban", "file"]\n'
        'workspace = "worktree"\n')
    return repo, db


def add_and_run(db: Path, title: str) -> tuple[int, Path]:
    card = int(kanban(db, "add", title, "--profile", "coder").stdout.strip()[1:])
    kanban(db, "dispatch", "--once")
    shown = json.loads(kanban(db, "show", str(card), "--json").stdout)["card"]
    assert shown["status"] == "done", shown
    return card, db.parent / "workspaces" / "default" / str(card)


def listed(repo: Path) -> str:
    return git("worktree", "list", cwd=repo)


def test_workspace_says_merged_and_removes_a_worktree(tmp_path: Path) -> None:
    repo, db = project(tmp_path)
    card, path = add_and_run(db, "write notes")
    done = kanban(db, "workspace", str(card))
    assert done.stdout.strip() == str(path)  # still only the path on stdout
    assert f"branch kanban/{card}: not merged into main (1 commit ahead)" in done.stderr
    state = json.loads(kanban(db, "workspace", str(card), "--json").stdout)["branch_state"]
    assert (state["merged"], state["ahead"], state["into"]) == (False, 1, "main")
    git("-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--no-edit",
        f"kanban/{card}", cwd=repo)
    assert f"kanban/{card}: merged into main" in kanban(db, "workspace", str(card)).stderr
    assert str(path) in listed(repo)
    removed = kanban(db, "workspace", str(card), "--remove")
    assert removed.stdout.strip() == f"removed worktree {path} (branch kanban/{card} kept)"
    assert not path.exists() and str(path) not in listed(repo)
    assert git("rev-parse", "--verify", "--quiet", f"kanban/{card}", cwd=repo)


def test_archive_and_gc_remove_worktrees(tmp_path: Path) -> None:
    repo, db = project(tmp_path)
    archived, archived_path = add_and_run(db, "first")
    collected, collected_path = add_and_run(db, "second")
    result = kanban(db, "archive", str(archived))
    assert f"removed worktree {archived_path}" in result.stderr
    assert not archived_path.exists() and str(archived_path) not in listed(repo)
    store = open_database(DbLocation(str(db), "flag"))
    try:  # the card finished long ago: gc's age
        with store.write() as conn:
            conn.run("UPDATE card SET updated_at = :old WHERE id = :id",
                     {"old": datetime(2020, 1, 1, tzinfo=UTC), "id": collected})
    finally:
        store.dispose()
    report = json.loads(kanban(db, "gc", "--json").stdout)
    assert (report["archived"], report["worktrees"]) == (1, 1)
    assert not collected_path.exists() and str(collected_path) not in listed(repo)
    for card in (archived, collected):
        assert git("rev-parse", "--verify", "--quiet", f"kanban/{card}", cwd=repo)


def test_a_running_or_unfinished_cards_worktree_is_not_removed(tmp_path: Path) -> None:
    _, db = project(tmp_path)
    card = int(kanban(db, "add", "later", "--profile", "coder").stdout.strip()[1:])
    refused = kanban(db, "workspace", str(card), "--remove", check=False)
    assert refused.returncode == 1 and "it is ready" in refused.stderr


def test_a_worktree_card_outside_a_repository_is_refused_at_add(tmp_path: Path) -> None:
    db = tmp_path / "plain" / ".kanban" / "kanban.db"
    kanban(db, "init")
    refused = kanban(db, "add", "x", "--workspace", "worktree", check=False)
    assert refused.returncode == 1
    assert refused.stderr.startswith("kanban: error: workspace 'worktree' needs the board's")
    assert "inside a git repository" in refused.stderr
    assert json.loads(kanban(db, "list", "--json").stdout)["cards"] == []


def test_cron_jobs_and_swarms_of_worktree_cards_are_refused_outside_a_repository(
        tmp_path: Path) -> None:
    """Their cards are added later (at a fire, by a dispatcher): the job or swarm is refused
    now, as `kanban add` refuses the card."""
    db = tmp_path / "plain" / ".kanban" / "kanban.db"
    kanban(db, "init")
    (db.parent / "config.toml").write_text('[profiles.coder]\nmodel = "scripted:x"\n'
                                           'workspace = "worktree"\n')
    for args in (["cron", "add", "nightly", "-s", "every 1h", "--goal", "g", "--profile",
                  "coder"],
                 ["cron", "add", "nightly", "-s", "every 1h", "--goal", "g", "--workspace",
                  "worktree"],
                 ["swarm", "g", "--part", "a", "--profile", "coder"],
                 ["swarm", "g", "--part", "a", "--synthesizer", "coder"]):
        refused = kanban(db, *args, check=False)
        assert refused.returncode == 1, args
        assert "inside a git repository" in refused.stderr and "Traceback" not in \
            refused.stderr, args
    kanban(db, "cron", "add", "nightly", "-s", "every 1h", "--goal", "g")
    refused = kanban(db, "cron", "edit", "nightly", "--profile", "coder", check=False)
    assert refused.returncode == 1 and "inside a git repository" in refused.stderr
    assert [j["name"] for j in json.loads(kanban(db, "cron", "list", "--json").stdout)
            ["jobs"]] == ["nightly"]
    assert json.loads(kanban(db, "list", "--json").stdout)["cards"] == []


def test_the_web_board_refuses_a_worktree_card_outside_a_repository(tmp_path: Path) -> None:
    db = tmp_path / "plain" / ".kanban" / "kanban.db"
    kanban(db, "init")
    (db.parent / "config.toml").write_text('[profiles.coder]\nmodel = "scripted:x"\n'
                                           'workspace = "worktree"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("KANBAN_")}
    server = start_web(db, env=env)
    try:
        client = server.client()
        made = client.post("/api/cards", json={"title": "x", "profile": "coder"},
                           headers={"X-CSRF-Token": server.csrf(client)})
        assert made.status_code == 409 and "inside a git repository" in made.json()["error"]
    finally:
        server.stop()
    assert json.loads(kanban(db, "list", "--json").stdout)["cards"] == []


def test_a_card_run_again_after_its_worktree_was_removed_by_hand(tmp_path: Path) -> None:
    """The worker notes its branch's tip in the board's record when it commits, so the
    branch is the board's own when the card runs again in a new checkout."""
    repo, db = project(tmp_path)
    card, path = add_and_run(db, "write notes")
    finished = git("rev-parse", f"kanban/{card}", cwd=repo)
    git("worktree", "remove", "--force", str(path), cwd=repo)  # by hand, not by kanban
    kanban(db, "retry", str(card))
    kanban(db, "dispatch", "--once")
    shown = json.loads(kanban(db, "show", str(card), "--json").stdout)["card"]
    assert shown["status"] == "done", shown
    # checked out on its own branch again (nothing new to commit: the same notes)
    assert git("rev-parse", f"kanban/{card}", cwd=repo) == finished
    assert f"on branch kanban/{card}" in shown["result"]
