"""Workspaces (worktree, dir:, parent), an MCP server and a plug-in toolset, each used by
real workers under a real dispatcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import BoardFiles
from tests.support.procs import kanban, query, wait_until
from tests.support.wheel import build_wheel

MCP_SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
PLUGIN = Path(__file__).resolve().parents[1] / "support" / "plugin_pkg" / "kanban_greeting"


def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def card_row(board: BoardFiles, card_id: int) -> tuple[str, str | None]:
    return query(board.path, "SELECT status, coalesce(result, error) FROM card WHERE id = ?",
                 card_id)[0]


def test_a_worktree_card_leaves_a_branch_with_its_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "app.py").write_text("print('v1')\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v1", cwd=repo)
    db = repo / ".kanban" / "kanban.db"
    kanban(db, "init")
    spec = tmp_path / "coder.json"
    spec.write_text(json.dumps([
        call("edit_file", path="app.py", old="v1", new="v2"),
        call("write_file", path="CHANGES.md", content="v2: louder\n"),
        call("kanban_complete", summary="bumped to v2")]))
    (db.parent / "config.toml").write_text(
        f'[profiles.coder]\nmodel = "scripted:{spec}"\ntoolsets = ["kanban", "file"]\n'
        'workspace = "worktree"\n')
    card = int(kanban(db, "add", "bump the version", "--profile", "coder").stdout.strip()[1:])
    kanban(db, "dispatch", "--once")
    status, result = query(db, "SELECT status, result FROM card WHERE id = ?", card)[0]
    assert status == "done", result
    assert f"on branch kanban/{card}" in result and "app.py" in result and "CHANGES.md" in result
    assert git("log", "-1", "--format=%s", f"kanban/{card}", cwd=repo) == (
        f"kanban #{card}: bump the version")
    assert git("show", f"kanban/{card}:app.py", cwd=repo) == "print('v2')"
    assert (repo / "app.py").read_text() == "print('v1')\n"  # main is untouched, not merged
    assert git("branch", "--show-current", cwd=repo) == "main"
    assert kanban(db, "workspace", str(card)).stdout.strip() == str(
        db.parent / "workspaces" / "default" / str(card))


def test_a_dir_card_edits_the_given_directory(board: BoardFiles, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("status: draft\n")
    spec = board.script("editor", [call("edit_file", path="notes.txt", old="draft",
                                        new="final"),
                                   call("kanban_complete", summary="finalised")])
    board.configure(f'[profiles.editor]\nmodel = "{spec}"\ntoolsets = ["kanban", "file"]\n')
    card = int(kanban(board.path, "add", "finalise", "--profile", "editor", "--workspace",
                      f"dir:{project}").stdout.strip()[1:])
    assert f"workspace dir:{project}" in kanban(board.path, "show", str(card),
                                                env={**os.environ, "COLUMNS": "300"}).stdout
    kanban(board.path, "dispatch", "--once")
    assert card_row(board, card) == ("done", "finalised")
    assert (project / "notes.txt").read_text() == "status: final\n"


def test_two_children_with_parent_share_a_directory(board: BoardFiles) -> None:
    writer = board.script("writer", [call("write_file", path="shared.txt",
                                          content="from the first child"),
                                     call("kanban_complete", summary="wrote shared.txt")])
    reader = board.script("reader", [call("read_file", path="shared.txt"),
                                     call("kanban_complete", summary="read it")])
    board.configure(f'[profiles.writer]\nmodel = "{writer}"\ntoolsets = ["kanban", "file"]\n'
                    f'[profiles.reader]\nmodel = "{reader}"\ntoolsets = ["kanban", "file"]\n')
    tasks = [{"title": "write", "goal": "g", "profile": "writer", "workspace": "parent"},
             {"title": "read", "goal": "g", "profile": "reader", "workspace": "parent",
              "after": [0]}]
    lead = board.script("lead", [call("delegate", tasks=tasks), {"text": "both done"}])
    kanban(board.path, "run", "share a folder", "--model", lead)
    kids = query(board.path, "SELECT id, status, parent_id FROM card WHERE parent_id IS NOT "
                             "NULL ORDER BY id")
    assert [status for _, status, _ in kids] == ["done", "done"]
    lead_id = kids[0][2]
    paths = {kanban(board.path, "workspace", str(i)).stdout.strip() for i, _, _ in kids}
    assert paths == {str(board.home / "workspaces" / "default" / str(lead_id))}
    read = query(board.path, """SELECT m.content FROM message m JOIN run r ON r.id = m.run_id
        WHERE r.card_id = ? AND m.role = 'tool'""", kids[1][0])[0][0]
    assert "1\tfrom the first child" in read


def test_an_mcp_server_tool_is_called_and_a_killed_server_is_an_error(
        board: BoardFiles, tmp_path: Path) -> None:
    marker = tmp_path / "server.pid"
    spec = board.script("mcp", [call("test__echo", text="over stdio"),
                                call("test__hang", marker=str(marker)),
                                call("test__add", a=20, b=22),
                                call("kanban_complete", summary="used the MCP server")])
    # Unsandboxed: the test finds the server by its host PID (test_sandbox runs one inside).
    board.configure(f'[profiles.mcp]\nmodel = "{spec}"\ntoolsets = ["kanban", "mcp:test"]\n'
                    'sandbox = "off"\n'
                    f'[mcp.test]\ncommand = "{sys.executable}"\nargs = ["{MCP_SERVER}"]\n'
                    "timeout_s = 60\n")
    card = board.add("use the server", profile="mcp")

    def kill_mid_call() -> None:
        wait_until(marker.exists, timeout=60, what="the MCP call under way")
        os.kill(int(marker.read_text()), signal.SIGKILL)

    killer = threading.Thread(target=kill_mid_call)
    killer.start()
    kanban(board.path, "dispatch", "--once")
    killer.join()
    assert card_row(board, card) == ("done", "used the MCP server")
    results = query(board.path, """SELECT m.name, m.content FROM message m JOIN run r
        ON r.id = m.run_id WHERE r.card_id = ? AND m.role = 'tool' ORDER BY m.seq""", card)
    assert results[0] == ("test__echo", "echo: over stdio")
    assert results[1][0] == "test__hang" and "stopped during the call" in results[1][1]
    assert results[2] == ("test__add", "42")  # started again on the next call


def test_a_toolset_from_an_installed_package(board: BoardFiles, tmp_path: Path) -> None:
    target = tmp_path / "site"
    wheel = build_wheel(PLUGIN, tmp_path, name="kanban-greeting", version="1.0",
                        entry_points={"kanban.toolsets": {
                            "greeting": "kanban_greeting:register"}})
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    spec = board.script("plug", [call("greet", name="kanban"),
                                 call("kanban_complete", summary="greeted")])
    board.configure(f'[profiles.plug]\nmodel = "{spec}"\ntoolsets = ["kanban", "greeting"]\n')
    env = {**os.environ, "PYTHONPATH": str(target)}
    card = int(kanban(board.path, "add", "say hello", "--profile", "plug",
                      env=env).stdout.strip()[1:])
    refused = kanban(board.path, "dispatch", "--once", check=False)  # not installed here
    assert refused.returncode == 1 and "unknown toolset(s) 'greeting'" in refused.stderr
    kanban(board.path, "dispatch", "--once", env=env)
    assert card_row(board, card) == ("done", "greeted")
    (greeting,) = query(board.path, """SELECT m.content FROM message m JOIN run r
        ON r.id = m.run_id WHERE r.card_id = ? AND m.name = 'greet'""", card)
    workspace = board.home / "workspaces" / "default" / str(card)
    assert greeting == (f"hello, kanban, from {workspace}",)
