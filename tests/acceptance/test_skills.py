"""A worker given a skill reads it with skill_view and follows it: real dispatcher and
worker processes, the real openai and anthropic clients against the local LLM server."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import (
    LLMServer,
    Reply,
    called_tools,
    text_reply,
    tool_reply,
    tool_results,
)
from tests.support.procs import kanban, query, start_dispatcher, stop, wait_until

SKILL = """---
name: release-notes
description: Write release notes from a changelog
tags: [docs, writing]
---
# Release notes

Group the changes under Added, Changed and Fixed.
When you finish, end the summary with the sign-off word: MARMALADE.
"""
USAGE = (1200, 40, 1000)  # input, output, cached (the provider's prompt cache hit)


def follow_the_skill(body: dict[str, Any]) -> Reply:
    """The model: read the skill, then complete the card the way the skill says."""
    tools = called_tools(body)
    if "skill_view" not in tools:
        return tool_reply(("skill_view", {"name": "release-notes"}))
    if "kanban_complete" not in tools:
        skill_text = "\n".join(tool_results(body))
        word = re.search(r"sign-off word: (\w+)", skill_text)
        files = re.findall(r"\.kanban-card/skills/\S+", skill_text)
        summary = f"Notes grouped as the skill says; files {files}. {word and word.group(1)}"
        return replace(tool_reply(("kanban_complete", {"summary": summary})), usage=USAGE)
    return text_reply("done", usage=USAGE)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_worker_reads_its_skill_and_follows_it(provider: str, board: BoardFiles,
                                                 tmp_path: Path) -> None:
    folder = board.home / "skills" / "release-notes"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL)
    (folder / "template.md").write_text("## Added\n## Changed\n## Fixed\n")
    board.configure(f'[profiles.default]\nmodel = "{provider}:test-model"\n')
    card = int(kanban(board.path, "add", "Notes for 1.2", "--skill", "release-notes"
                      ).stdout.strip().lstrip("#"))
    with LLMServer(responder=follow_the_skill) as llm:
        d = start_dispatcher(board.path, "--max-workers", "1", env={**os.environ, **llm.env()},
                             log=tmp_path / "d.log")
        try:
            wait_until(lambda: query(board.path, "SELECT status FROM card WHERE id = ?", card)
                       in ([("done",)], [("failed",)]), timeout=60, what="the card to finish")
        finally:
            stop(d)
        requests = llm.requests
    (status, result), = query(board.path, "SELECT status, result FROM card WHERE id = ?", card)
    assert status == "done", (tmp_path / "d.log").read_text()[-2000:]
    assert result.endswith("MARMALADE")  # the skill's text reached the model, and it obeyed
    assert ".kanban-card/skills/release-notes/template.md" in result
    first = requests[0].body
    # The skills are listed in a user message right after the system prompt.
    listed = first["messages"][0] if provider == "anthropic" else first["messages"][1]
    assert listed["role"] == "user"
    assert "release-notes: Write release notes from a changelog (tags: docs, writing)" in (
        json.dumps(listed["content"]))
    # The skill's other files are in the workspace, read-only and not executable.
    copy = (board.home / "workspaces" / "default" / str(card) / ".kanban-card" / "skills"
            / "release-notes" / "template.md")
    assert copy.read_text().startswith("## Added")
    assert stat.S_IMODE(copy.stat().st_mode) == 0o444
    # The usage ledger records the cached tokens the provider reported.
    cached = query(board.path, "SELECT sum(u.cached_tokens) FROM usage u JOIN run r "
                               "ON r.id = u.run_id WHERE r.card_id = ?", card)[0][0]
    assert cached >= USAGE[2]
    if provider == "anthropic":
        assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        names = [t["name"] for t in first["tools"]]
        assert "skill_view" in names and "kanban_complete" in names
        # Every turn sends the same cached prefix: system prompt and tools unchanged.
        assert all(r.body["system"] == first["system"] for r in requests)
        assert all(r.body["tools"] == first["tools"] for r in requests)


def test_an_unknown_skill_is_refused_at_add_time(board: BoardFiles) -> None:
    done = kanban(board.path, "add", "x", "--skill", "nope", check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == ("kanban: error: unknown skill 'nope' (known: none; see "
                                   "`kanban skills`)")
    assert query(board.path, "SELECT count(*) FROM card") == [(0,)]


def test_a_worker_finds_its_cards_attachments_in_its_workspace(board: BoardFiles,
                                                               tmp_path: Path) -> None:
    card = board.add("Summarise the brief")
    brief = tmp_path / "brief.md"
    brief.write_text("# The brief\n")
    brief.chmod(0o755)
    kanban(board.path, "attach", str(card), str(brief))
    d = start_dispatcher(board.path, "--max-workers", "1", log=tmp_path / "d.log")
    try:
        wait_until(lambda: query(board.path, "SELECT status FROM card WHERE id = ?", card)
                   == [("done",)], timeout=60, what="the card to finish")
    finally:
        stop(d)
    copy = board.home / "workspaces" / "default" / str(card) / ".kanban-card" / "attachments"
    assert (copy / "brief.md").read_text() == "# The brief\n"
    assert stat.S_IMODE((copy / "brief.md").stat().st_mode) == 0o444  # not executable
    (prompt,) = query(board.path, "SELECT m.content FROM message m JOIN run r ON r.id = "
                                  "m.run_id WHERE r.card_id = ? AND m.seq = 2", card)[0]
    assert ".kanban-card/attachments/brief.md (12 bytes" in prompt
