"""`kanban log` shows a resumed run's inherited messages once, under the run that wrote
them, and marks where a run continued an earlier one (issue 29, item 7)."""

from __future__ import annotations

import json
import os

from tests.acceptance.conftest import BoardFiles
from tests.acceptance.test_inbox import DANGEROUS, asks_then_completes
from tests.support.llm_server import LLMServer
from tests.support.procs import kanban


def test_a_resumed_runs_log_shows_each_message_once(board: BoardFiles) -> None:
    board.configure('[profiles.worker]\nmodel = "openai:test-model"\n'
                    'toolsets = ["kanban", "file", "terminal"]\napproval = "ask"\n')
    card = board.add("push it", profile="worker")
    with LLMServer(responder=asks_then_completes) as server:
        env = {**os.environ, **server.env()}
        blocked = kanban(board.path, "dispatch", "--once", env=env, check=False)
        assert blocked.returncode == 4, blocked.stderr  # it waits for the approval
        kanban(board.path, "approve", str(card))
        kanban(board.path, "dispatch", "--once", env=env)
    log = json.loads(kanban(board.path, "log", str(card), "--json").stdout)
    first, second = log["runs"]
    assert (first["continues_run"], first["inherited"]) == (None, 0)
    assert second["continues_run"] == first["id"]
    assert second["inherited"] == len(first["messages"]) > 0
    flags = [m["inherited"] for m in second["messages"]]
    assert flags == [True] * second["inherited"] + [False] * (len(flags) - second["inherited"])
    assert not any(m["inherited"] for m in first["messages"])
    for mine, theirs in zip(second["messages"], first["messages"], strict=False):
        assert (mine["role"], mine["content"]) == (theirs["role"], theirs["content"])
    text = kanban(board.path, "log", str(card)).stdout
    assert f"(continues run {first['id']}: its {second['inherited']} message(s) above" in text
    calls = [line for line in text.splitlines() if "→ terminal" in line]
    assert len(calls) == 2 and all(DANGEROUS in line for line in calls)  # each run's own
    assert text.count("system:") == 1
