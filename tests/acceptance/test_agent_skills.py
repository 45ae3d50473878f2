"""Agent-written skills (issue 33): a worker whose profile has skills_write saves a
procedure as a skill and refines it; a later card on another profile is given it and
follows it. Real dispatcher and worker processes, the real openai client against the local
LLM server."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Sequence
from typing import Any

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply, tool_results
from tests.support.procs import kanban, query

PROFILES = """
[profiles.writer]
model = "openai:test-model"
skills_write = true
token_budget = 100000000  # the hostile 1 MB body is counted as tokens sent
context_window = 100000000  # and no summariser call between the scripted turns

[profiles.reader]
model = "openai:test-model"
"""
BODY = "# Weekly triage\n\n1. Read the new issues.\n2. End the summary with: QUINCE.\n"
Call = tuple[str, dict[str, Any]]


def replayer(calls: Sequence[Call], summary: Callable[[list[str]], str]
             ) -> Callable[[dict[str, Any]], Reply]:
    """A model that makes `calls`, one per turn (counted here: a long conversation is
    compressed, so the results it is sent say nothing of how far it got), then completes
    with `summary(the last results it was sent)`."""
    turn = iter(range(len(calls) + 2))

    def respond(body: dict[str, Any]) -> Reply:
        step = next(turn, len(calls) + 1)
        if step < len(calls):  # a megabyte in 16-character deltas would take half a minute
            return tool_reply(calls[step], chunk_chars=65536)
        if step == len(calls):
            return tool_reply(("kanban_complete", {"summary": summary(tool_results(body))}))
        return text_reply("done")

    return respond


def dispatch(board: BoardFiles, card: int, calls: Sequence[Call],
             summary: Callable[[list[str]], str] = lambda results: "done") -> list[str]:
    """One dispatch with the model making `calls` on `card`; the tool results, as stored."""
    with LLMServer(responder=replayer(calls, summary)) as llm:
        kanban(board.path, "dispatch", "--once", env={**os.environ, **llm.env()})
    return [content for (content,) in query(
        board.path, "SELECT m.content FROM message m JOIN run r ON r.id = m.run_id "
                    "WHERE r.card_id = ? AND m.role = 'tool' ORDER BY m.seq", card)]


def add(board: BoardFiles, *args: str) -> int:
    return int(kanban(board.path, "add", *args).stdout.strip().lstrip("#"))


def test_a_skill_written_on_one_card_is_followed_on_the_next(board: BoardFiles) -> None:
    board.configure(PROFILES)
    first = add(board, "Triage this week's issues", "--profile", "writer")
    results = dispatch(board, first, [
        ("skill_write", {"name": "weekly-triage", "description": "Triage the week's issues",
                         "body": BODY, "files": {"checklist.md": "- labels\n"}}),
        ("skill_patch", {"name": "weekly-triage", "old": "QUINCE", "new": "DAMSON"}),
        ("skill_write", {"name": "../x", "description": "d", "body": "b"}),
        ("skill_write", {"name": "bell\x07", "description": "d", "body": "b"}),
        ("skill_write", {"name": "big", "description": "d", "body": "x" * 100_000}),
        ("skill_write", {"name": "weekly-triage", "description": "again", "body": "b"}),
        ("skill_write", {"name": "big", "description": "d", "body": "x" * 1_000_000}),
    ])
    assert "written" in results[0] and "version 1" in results[1], results
    assert all("a skill name is 1-64" in r for r in results[2:4]), results
    assert "body is 100,000 characters; the limit is 65,536" in results[4], results
    assert "a skill named 'weekly-triage' exists" in results[5], results
    assert "the arguments of this skill_write call are too large" in results[6], results
    assert len(results) == 8, results  # and kanban_complete
    assert query(board.path, "SELECT status FROM card WHERE id = ?", first) == [("done",)]
    folder = board.home / "agent-skills" / "weekly-triage"
    text = (folder / "SKILL.md").read_text()
    assert "DAMSON" in text and "QUINCE" not in text
    assert re.search(rf"written_by:\n  card: {first}\n  profile: writer\n  model: "
                     r"openai:test-model", text), text
    assert re.search(r"^written_at: '?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", text, re.M), text
    assert re.search(rf"patched_by:\n  card: {first}\n  profile: writer\n", text), text
    assert "QUINCE" in (folder / ".versions" / "SKILL.1.md").read_text()  # the old version
    assert stat.S_IMODE((folder / "checklist.md").stat().st_mode) & 0o111 == 0
    assert sorted(p.name for p in (board.home / "agent-skills").iterdir()) == ["weekly-triage"]
    assert not (board.home / "x").exists() and not (board.home / "big").exists()

    # A later card on another profile is given the skill, reads it and follows it.
    second = add(board, "Triage next week's issues", "--profile", "reader",
                 "--skill", "weekly-triage")
    results = dispatch(board, second, [("skill_view", {"name": "weekly-triage"}),
                               ("skill_write", {"name": "n", "description": "d", "body": "b"})],
                       summary=lambda seen: "signed " + " ".join(
                           re.findall(r"End the summary with: (\w+)", seen[0])))
    assert "unknown tool" in results[1] or "not" in results[1], results
    (result,) = query(board.path, "SELECT result FROM card WHERE id = ?", second)[0]
    assert result == "signed DAMSON"
    assert not (board.home / "agent-skills" / "n").exists()  # a reader writes no skills

    # Pinned, the skill is out of an agent's reach.
    kanban(board.path, "skills", "pin", "weekly-triage")
    third = add(board, "Refine the triage skill", "--profile", "writer")
    results = dispatch(board, third, [("skill_patch", {"name": "weekly-triage", "old": "DAMSON",
                                                "new": "PLUM"})])
    assert "pinned" in results[0], results
    assert "DAMSON" in (folder / "SKILL.md").read_text()

    uses = dict(query(board.path, "SELECT kind, count(*) FROM skill_use "
                                  "WHERE skill = 'weekly-triage' GROUP BY kind"))
    assert uses == {"write": 1, "patch": 1, "given": 1, "view": 1}
    listed = kanban(board.path, "skills").stdout
    assert re.search(r"^weekly-triage \(agent\): Triage the week's issues — pinned, 2 uses, "
                     r"last \d{4}-", listed, re.M), listed
