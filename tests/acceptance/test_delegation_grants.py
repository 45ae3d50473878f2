"""What a lead may hand its children: toolsets granted and dropped, each child on its own
profile's model, the stricter limits, and unknown names refused."""

from __future__ import annotations

import json

from tests.acceptance.conftest import BoardFiles
from tests.support.procs import kanban, query


def _lead(board: BoardFiles, tasks: list[dict]) -> str:
    return board.script("lead", [{"tool_calls": [{"name": "delegate",
                                                  "arguments": {"tasks": tasks}}]},
                                 {"text": "the lead is done"}])


def _delegate_result(board: BoardFiles) -> str:
    return query(board.path, """SELECT m.content FROM message m JOIN run r ON r.id = m.run_id
        JOIN card c ON c.id = r.card_id WHERE c.created_by = 'lead' AND m.role = 'tool'""")[0][0]


def test_granted_dropped_model_and_limits(board: BoardFiles) -> None:
    child = board.script("child", [{"tool_calls": [{"name": "kanban_complete",
                                                    "arguments": {"summary": "ok"}}]}])
    board.configure(f"""
[limits]
never_granted = ["web"]
child_timeout_s = 300
child_max_attempts = 3
[profiles.lead]
toolsets = ["kanban", "file", "web"]
[profiles.coder]
model = "{child}"
toolsets = ["kanban", "file", "terminal"]
timeout_s = 120
max_attempts = 5
description = "Writes code."
""")
    tasks = [{"title": "code it", "goal": "g", "profile": "coder"},
             {"title": "browse", "goal": "g", "profile": "coder",
              "toolsets": ["file", "web", "delegate"]}]
    kanban(board.path, "run", "build it", "--model", _lead(board, tasks))
    kids = query(board.path, "SELECT title, status, toolsets, model, timeout_s, max_attempts "
                             "FROM card WHERE parent_id IS NOT NULL ORDER BY id")
    assert kids == [("code it", "done", "kanban,file", child, 120.0, 3),
                    ("browse", "done", "kanban,file", child, 120.0, 3)]
    children = json.loads(_delegate_result(board))["children"]
    assert children[0]["toolsets_not_granted"] == {
        "terminal": "the lead does not have it (its profile's toolsets)"}
    assert children[1]["toolsets_not_granted"] == {
        "web": "never granted to delegated cards", "delegate": "never granted to delegated cards"}


def test_unknown_toolsets_and_profiles_are_refused_to_the_lead(board: BoardFiles) -> None:
    kanban(board.path, "run", "x", "--model", _lead(board, [
        {"title": "a", "goal": "g", "toolsets": ["kanban", "shell"]}]))
    assert "unknown toolset(s) 'shell'" in _delegate_result(board)
    kanban(board.path, "run", "y", "--model", _lead(board, [
        {"title": "b", "goal": "g", "profile": "wizard"}]))
    results = [r for (r,) in query(board.path, "SELECT m.content FROM message m "
                                               "WHERE m.role = 'tool' ORDER BY m.id")]
    assert "must be one of" in results[-1] and '"general"' in results[-1]
    assert query(board.path, "SELECT count(*) FROM card WHERE parent_id IS NOT NULL") == [(0,)]
