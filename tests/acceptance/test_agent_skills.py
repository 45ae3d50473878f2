"""Agent-written skills (issue 33): a worker whose profile has skills_write saves a
procedure as a skill and refines it; a later card on another profile is given it and
follows it. Real dispatcher and worker processes, the real openai client against the local
LLM server."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply, tool_results
from tests.support.procs import kanban, query

PROFILES = """
[profiles.writer]
model = "openai:test-model"
skills_write = true
token_budget = 100000000  # the hostile 1 MB body is counted as tokens sent

[profiles.reader]
model = "openai:test-model"
"""
BODY = "# Weekly triage\n\n1. Read the new issues.\n2. End the summary with: QUINCE.\n"
Call = tuple[str, dict[str, Any]]


def replayer(calls: Sequence[Call], seen: list[str],
             summary: Callable[[list[str]], str] = lambda results: "done"
             ) -> Callable[[dict[str, Any]], Reply]:
    """A model that makes `calls`, one per turn, then completes with `summary(results)`."""

    def respond(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        seen[:] = results
        if len(results) < len(calls):
            return tool_reply(calls[len(results)])
        if len(results) == len(calls):
            return tool_reply(("kanban_complete", {"summary": summary(results)}))
        return text_reply("done")

    return respond


def dispatch(board: BoardFiles, calls: Sequence[Call],
             summary: Callable[[list[str]], str] = lambda results: "done") -> list[str]:
    seen: list[str] = []
    with LLMServer(responder=replayer(calls, seen, summary)) as llm:
        kanban(board.path, "dispatch", "--once", env={**os.environ, **llm.env()})
    return seen


def add(board: BoardFiles, *args: str) -> int:
    return int(kanban(board.path, "add", *args).stdout.strip().lstrip("#"))


def test_a_skill_written_on_one_card_is_followed_on_the_next(board: BoardFiles) -> None:
    board.configure(PROFILES)
    first = add(board, "Triage this week's issues", "--profile", "writer")
    results = dispatch(board, [
        ("skill_write", {"name": "weekly-triage", "description": "Triage the week's issues",
                         "body": BODY, "files": {"checklist.md": "- labels\n"}}),
        ("skill_patch", {"name": "weekly-triage", "old": "QUINCE", "new": "DAMSON"}),
        ("skill_write", {"name": "../x", "description": "d", "body": "b"}),
        ("skill_write", {"name": "bell\x07", "description": "d", "body": "b"}),
        ("skill_write", {"name": "big", "description": "d", "body": "x" * 1_000_000}),
        ("skill_write", {"name": "big", "description": "d", "body": "x" * 100_000}),
        ("skill_write", {"name": "weekly-triage", "description": "again", "body": "b"}),
    ])
    assert "written" in results[0] and "version 1" in results[1], results
    assert all(r.startswith("Error: a skill name is 1-64") for r in results[2:4]), results
    assert results[4].startswith("Error: not run: the arguments") and \
        results[5] == "Error: body is 100,000 characters; the limit is 65,536", results
    assert results[6].startswith("Error: a skill named 'weekly-triage' exists"), results
    assert query(board.path, "SELECT status FROM card WHERE id = ?", first) == [("done",)]
    folder = board.home / "agent-skills" / "weekly-triage"
    text = (folder / "SKILL.md").read_text()
    assert "DAMSON" in text and "QUINCE" not in text
    assert re.search(rf"written_by:\n  card: {first}\n  profile: writer\n  model: "
                     r"openai:test-model", text), text
    assert "QUINCE" in (folder / ".versions" / "SKILL.1.md").read_text()  # the old version
    assert stat.S_IMODE((folder / "checklist.md").stat().st_mode) & 0o111 == 0
    assert sorted(p.name for p in (board.home / "agent-skills").iterdir()) == ["weekly-triage"]
    assert not (board.home / "x").exists() and not (board.home / "big").exists()

    # A later card on another profile is given the skill, reads it and follows it.
    second = add(board, "Triage next week's issues", "--profile", "reader",
                 "--skill", "weekly-triage")
    results = dispatch(board, [("skill_view", {"name": "weekly-triage"}),
                               ("skill_write", {"name": "n", "description": "d", "body": "b"})],
                       summary=lambda seen: "signed " + " ".join(
                           re.findall(r"End the summary with: (\w+)", seen[0])))
    assert "unknown tool" in results[1] or "not" in results[1], results
    (result,) = query(board.path, "SELECT result FROM card WHERE id = ?", second)[0]
    assert result == "signed DAMSON"
    assert not (board.home / "agent-skills" / "n").exists()  # a reader writes no skills

    # Pinned, the skill is out of an agent's reach.
    kanban(board.path, "skills", "pin", "weekly-triage")
    add(board, "Refine the triage skill", "--profile", "writer")
    results = dispatch(board, [("skill_patch", {"name": "weekly-triage", "old": "DAMSON",
                                                "new": "PLUM"})])
    assert "pinned" in results[0], results
    assert "DAMSON" in (folder / "SKILL.md").read_text()

    uses = dict(query(board.path, "SELECT kind, count(*) FROM skill_use "
                                  "WHERE skill = 'weekly-triage' GROUP BY kind"))
    assert uses == {"write": 1, "patch": 1, "given": 1, "view": 1}
    listed = kanban(board.path, "skills").stdout
    assert re.search(r"^weekly-triage \(agent\): Triage the week's issues — pinned, 2 uses, "
                     r"last \d{4}-", listed, re.M), listed
