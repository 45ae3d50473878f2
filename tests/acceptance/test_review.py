"""Review gates through the real CLI, dispatcher and workers: a verify command, a person's
approve/reject, a reviewer agent over the real SDK clients, and dependents that wait."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_bodies import called_tools, last_user_text
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply
from tests.support.procs import kanban, query, start_dispatcher, stop, wait_until

TEST_FILE = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
# The first attempt leaves a subtraction; the next one (calc.py exists) fixes it. The fixed
# line is longer, so a cached bytecode file can never pass for it.
WRITE_CALC = ("if [ -f calc.py ]; then printf 'def add(a, b):\\n    return a + b  # fixed\\n' "
              "> calc.py; else printf 'def add(a, b):\\n    return a - b\\n' > calc.py; fi")


def worker_env() -> dict[str, str]:
    """The test's environment, with this interpreter's pytest first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    return {**env, "PATH": path}


def statuses(board: BoardFiles, card_id: int) -> list[str]:
    return [row[0] for row in query(board.path, "SELECT kind FROM event WHERE card_id = ? "
                                                "ORDER BY id", card_id)]


def status(board: BoardFiles, card_id: int) -> str:
    return str(query(board.path, "SELECT status FROM card WHERE id = ?", card_id)[0][0])


def test_verify_gate_sends_a_failing_attempt_back_with_its_output(board: BoardFiles) -> None:
    model = board.script("coder", [
        {"tool_calls": [{"name": "write_file",
                         "arguments": {"path": "test_calc.py", "content": TEST_FILE}}]},
        {"tool_calls": [{"name": "terminal", "arguments": {"command": WRITE_CALC}}]},
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "calc.add"}}]},
    ])
    board.configure(f"""
[profiles.coder]
model = "{model}"
toolsets = ["kanban", "file", "terminal"]
approval = "allow"
""")
    card = int(kanban(board.path, "add", "add two numbers", "--profile", "coder",
                      "--verify", "pytest -q").stdout.strip().lstrip("#"))
    dependent = board.add("use the sum", depends_on=[card])
    proc = start_dispatcher(board.path, env=worker_env(), log=board.home / "dispatch.log")
    try:
        wait_until(lambda: status(board, card) == "done", timeout=90, what="the gated card done")
        wait_until(lambda: status(board, dependent) == "done", timeout=60,
                   what="its dependent done")
    finally:
        stop(proc)
    runs = query(board.path, "SELECT id, outcome FROM run WHERE card_id = ? ORDER BY id", card)
    assert [outcome for _, outcome in runs] == ["completed", "completed"]
    kinds = statuses(board, card)
    assert kinds.count("review_requested") == 2
    assert kinds.index("changes_requested") < kinds.index("review_passed")
    # the first attempt's feedback (pytest's own report) opens the second attempt's prompt
    prompts = [content for (content,) in query(
        board.path, "SELECT content FROM message WHERE run_id = ? AND role = 'user' "
                    "ORDER BY seq", runs[1][0])]
    assert any("verify `pytest -q` failed with exit code 1" in p and "1 failed" in p
               for p in prompts), prompts
    first = [content for (content,) in query(
        board.path, "SELECT content FROM message WHERE run_id = ? AND role = 'user'",
        runs[0][0])]
    assert not any("asked for changes" in p for p in first)
    # the dependent started only after the gate passed
    passed_at = query(board.path, "SELECT at FROM event WHERE card_id = ? AND "
                                  "kind = 'review_passed'", card)[0][0]
    started = query(board.path, "SELECT min(started_at) FROM run WHERE card_id = ?",
                    dependent)[0][0]
    assert started >= passed_at
    assert query(board.path, "SELECT reviews, feedback FROM card WHERE id = ?", card) == [
        (1, None)]


def test_human_gate_waits_for_approve_and_reject(board: BoardFiles) -> None:
    board.configure('[profiles.default]\nmodel = "scripted:demo"\n')
    card = int(kanban(board.path, "add", "write the notes", "--human").stdout.strip()[1:])
    dependent = board.add("publish the notes", depends_on=[card])
    proc = start_dispatcher(board.path, env=worker_env())
    try:
        wait_until(lambda: status(board, card) == "review", timeout=60, what="review")
        assert status(board, dependent) == "todo"
        out = kanban(board.path, "reject", str(card), "--feedback", "cite your sources")
        assert "sent back" in out.stdout
        wait_until(lambda: statuses(board, card).count("review_requested") == 2, timeout=60,
                   what="the second attempt in review")
        assert status(board, card) == "review"
        assert status(board, dependent) == "todo"
        assert query(board.path, "SELECT count(*) FROM run WHERE card_id = ?", dependent) == [
            (0,)]
        kanban(board.path, "approve", str(card), "--note", "good")
        wait_until(lambda: status(board, dependent) == "done", timeout=60, what="dependent")
    finally:
        stop(proc)
    assert status(board, card) == "done"
    prompts = [content for (content,) in query(
        board.path, "SELECT m.content FROM message m JOIN run r ON r.id = m.run_id "
                    "WHERE r.card_id = ? AND r.attempt = 2 AND m.role = 'user'", card)]
    assert any("cite your sources" in p for p in prompts)


def test_bad_gate_flags_are_one_line_errors(board: BoardFiles) -> None:
    both = kanban(board.path, "add", "x", "--human", "--verify", "true", check=False)
    assert both.returncode != 0 and "one review gate" in both.stderr
    assert "Traceback" not in both.stderr
    unknown = kanban(board.path, "add", "x", "--reviewer", "nobody", check=False)
    assert unknown.returncode != 0 and "unknown profile 'nobody'" in unknown.stderr
    not_review = kanban(board.path, "reject", "1", "--feedback", "no", check=False)
    assert not_review.returncode != 0 and "Traceback" not in not_review.stderr
    assert query(board.path, "SELECT count(*) FROM card") == [(0,)]


def essay_and_critic(body: dict[str, Any]) -> Reply:
    """Either agent, as a pure function of its prompt: the writer completes (v2 once told to
    cite sources); the critic asks for sources on v1 and approves v2."""
    if called_tools(body):
        return text_reply("finished")
    prompt = last_user_text(body)
    if ": Review #" in prompt:
        if "essay v2" in prompt:
            return tool_reply(("kanban_approve", {"note": "sources are cited now"}))
        return tool_reply(("kanban_request_changes", {"feedback": "cite your sources"}))
    if "cite your sources" in prompt:
        return tool_reply(("kanban_complete", {"summary": "essay v2, with sources"}))
    return tool_reply(("kanban_complete", {"summary": "essay v1"}))


@pytest.mark.parametrize(("writer", "critic"), [("openai", "anthropic"),
                                                ("anthropic", "openai")])
def test_reviewer_gate_requests_changes_once_then_approves(board: BoardFiles, writer: str,
                                                           critic: str) -> None:
    board.configure(f"""
[profiles.writer]
model = "{writer}:test-model"

[profiles.critic]
model = "{critic}:test-model"
description = "Reviews essays"
""")
    card = int(kanban(board.path, "add", "write the essay", "--profile", "writer",
                      "--reviewer", "critic", "--max-reviews", "2").stdout.strip()[1:])
    dependent = board.add("publish the essay", profile="writer", depends_on=[card])
    with LLMServer(responder=essay_and_critic) as server:
        proc = start_dispatcher(board.path, env={**worker_env(), **server.env()},
                                log=board.home / "dispatch.log")
        try:
            wait_until(lambda: status(board, dependent) == "done", timeout=90,
                       what="the dependent of the reviewed card done")
        finally:
            stop(proc)
        routes = {r.route for r in server.requests}
    assert routes == {"openai", "anthropic"}
    assert query(board.path, "SELECT status, result, reviews FROM card WHERE id = ?",
                 card) == [("done", "essay v2, with sources", 1)]
    reviewers = query(board.path, "SELECT status, profile, result FROM card WHERE subject_id "
                                  "= ? AND role = 'reviewer' ORDER BY id", card)
    assert reviewers == [
        ("done", "critic", f"requested changes on #{card}: cite your sources"),
        ("done", "critic", f"approved #{card}: sources are cited now")]
    kinds = [k for k in statuses(board, card) if k in (
        "review_requested", "changes_requested", "review_passed")]
    assert kinds == ["review_requested", "changes_requested", "review_requested",
                     "review_passed"]
    started = query(board.path, "SELECT min(started_at) FROM run WHERE card_id = ?",
                    dependent)[0][0]
    passed_at = query(board.path, "SELECT at FROM event WHERE card_id = ? AND "
                                  "kind = 'review_passed'", card)[0][0]
    assert started >= passed_at
