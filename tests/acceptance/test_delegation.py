"""`kanban run`: a lead delegates to the board through real processes and real SDK clients."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.llm_server import (
    LLMServer,
    Reply,
    called_tools,
    last_user_text,
    text_reply,
    tool_reply,
    tool_results,
)
from tests.support.procs import KANBAN, counts, kanban, query, wait_until

GOAL = "Compare three SQLite journal modes"


def _run(board: BoardFiles, *args: str, env: dict[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    return kanban(board.path, "run", GOAL, *args, env=env, check=check)


def _lead_id(board: BoardFiles) -> int:
    return query(board.path, "SELECT id FROM card WHERE created_by = 'lead' ORDER BY id DESC "
                             "LIMIT 1")[0][0]


def _lead_tool_results(board: BoardFiles) -> list[str]:
    return [row[0] for row in query(board.path, """
        SELECT m.content FROM message m JOIN run r ON r.id = m.run_id
        WHERE r.card_id = ? AND m.role = 'tool' ORDER BY m.seq""", _lead_id(board))]


def _nothing_running(board: BoardFiles) -> None:
    assert counts(board.path).get("running", 0) == 0
    assert counts(board.path).get("ready", 0) == 0


def test_scripted_lead_delegates_three_children_with_a_dependency(board: BoardFiles) -> None:
    out = _run(board).stdout
    lead = _lead_id(board)
    kids = query(board.path, "SELECT id, status, result FROM card WHERE parent_id = ? "
                             "ORDER BY id", lead)
    assert len(kids) == 3 and all(status == "done" for _, status, _ in kids)
    answer = query(board.path, "SELECT result FROM card WHERE id = ?", lead)[0][0]
    assert answer.splitlines()[0] in out
    for _, _, result in kids:
        assert result in answer  # the answer carries every child's result
    draft = kids[2][0]
    assert query(board.path, "SELECT depends_on_id FROM dependency WHERE card_id = ? "
                             "ORDER BY depends_on_id", draft) == [(kids[0][0],), (kids[1][0],)]
    shown = json.loads(kanban(board.path, "show", str(lead), "--json").stdout)
    assert shown["card"]["created_by"] == "lead" and shown["card"]["status"] == "done"
    assert [c["id"] for c in shown["children"]] == [k[0] for k in kids]
    assert "children" in kanban(board.path, "show", str(lead)).stdout
    # Only status and summary reach the lead, never a child's transcript.
    (result,) = _lead_tool_results(board)
    assert set(json.loads(result)["children"][0]) <= {"id", "title", "status", "summary",
                                                      "error"}
    _nothing_running(board)


def _offered_tools(body: dict[str, Any]) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


def _fake_model(body: dict[str, Any]) -> Reply:
    """Lead: delegate three tasks, then answer from the results. Worker: complete its card."""
    tools = _offered_tools(body)
    if "delegate" in tools:
        if "delegate" not in called_tools(body):
            tasks = [{"title": "alpha", "goal": "say alpha"},
                     {"title": "beta", "goal": "say beta"},
                     {"title": "gamma", "goal": "say gamma", "after": [0]}]
            return tool_reply(("delegate", {"tasks": tasks}))
        children = json.loads(tool_results(body)[-1])["children"]
        return text_reply("ANSWER: " + "; ".join(c.get("summary", "?") for c in children))
    if "kanban_complete" in called_tools(body):
        return text_reply("finished")
    title = re.search(r"Your card is #\d+: (.+)", last_user_text(body) or "")
    name = title.group(1).strip() if title else "unknown"
    return tool_reply(("kanban_complete", {"summary": f"{name} done over HTTP"}))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_real_sdk_clients_delegate_over_http(board: BoardFiles, provider: str) -> None:
    with LLMServer(responder=_fake_model) as server:
        env = {**os.environ, **server.env()}
        out = _run(board, "--model", f"{provider}:test-model",
                   env={**env, "COLUMNS": "300"}).stdout
        routes = {r.route for r in server.requests}
        delegated = [r for r in server.requests if "delegate" in _offered_tools(r.body)]
    assert routes == {provider}
    assert len(delegated) == 2  # the delegate call, then the answer
    assert "ANSWER: alpha done over HTTP; beta done over HTTP; gamma done over HTTP" in out
    kids = query(board.path, "SELECT title, status, model FROM card WHERE parent_id = ?",
                 _lead_id(board))
    assert sorted(kids) == [(n, "done", f"{provider}:test-model")
                            for n in ("alpha", "beta", "gamma")]
    _nothing_running(board)


def _lead_script(board: BoardFiles, tasks: list[dict[str, Any]]) -> str:
    return board.script("lead", [{"tool_calls": [{"name": "delegate",
                                                  "arguments": {"tasks": tasks}}]},
                                 {"text": "the lead is done"}])


def test_over_limit_batch_is_refused_to_the_lead(board: BoardFiles) -> None:
    spec = _lead_script(board, [{"title": f"t{i}", "goal": "g"} for i in range(4)])
    _run(board, "--model", spec)
    (result,) = _lead_tool_results(board)
    assert "too many tasks in one call: 4 (the limit is 3)" in result
    assert query(board.path, "SELECT count(*) FROM card") == [(1,)]
    _nothing_running(board)


def test_exceeded_depth_is_refused(board: BoardFiles) -> None:
    board.configure("[limits]\nmax_depth = 0\n")
    spec = _lead_script(board, [{"title": "deep", "goal": "g"}])
    _run(board, "--model", spec)
    (result,) = _lead_tool_results(board)
    assert "depth 1; the limit is 0" in result
    _nothing_running(board)


def test_children_cannot_delegate_further(board: BoardFiles) -> None:
    child = board.script("child", [
        {"tool_calls": [{"name": "delegate", "arguments": {"tasks": [{"title": "x",
                                                                      "goal": "y"}]}}]},
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "tried"}}]}])
    board.configure(f'[profiles.child]\nmodel = "{child}"\n')
    spec = _lead_script(board, [{"title": "try to delegate", "goal": "g", "profile": "child",
                                 "toolsets": ["kanban", "delegate"]}])
    _run(board, "--model", spec)
    kid = query(board.path, "SELECT id, toolsets FROM card WHERE parent_id = ?",
                _lead_id(board))[0]
    assert kid[1] == "kanban"  # `delegate` was not granted
    refusal = query(board.path, "SELECT m.content FROM message m JOIN run r ON r.id = m.run_id "
                                "WHERE r.card_id = ? AND m.role = 'tool' ORDER BY m.seq",
                    kid[0])[0][0]
    assert "delegate" in refusal and ("not available" in refusal or "unknown tool" in refusal)
    assert query(board.path, "SELECT count(*) FROM card") == [(2,)]


def test_paused_spawning_answers_the_lead_at_once(board: BoardFiles) -> None:
    kanban(board.path, "pause")
    spec = _lead_script(board, [{"title": "held", "goal": "g"}])
    _run(board, "--model", spec)
    (result,) = _lead_tool_results(board)
    assert "spawning is paused" in result
    assert query(board.path, "SELECT count(*) FROM card") == [(1,)]


def test_failing_child_is_reported_to_the_lead(board: BoardFiles) -> None:
    board.configure('[profiles.broken]\nmodel = "scripted:no-such-script"\n')
    spec = _lead_script(board, [{"title": "will fail", "goal": "g", "profile": "broken"}])
    # the lead answers, but a child it relied on failed: exit 4 (kanban/cli/exit_codes.py)
    assert _run(board, "--model", spec, check=False).returncode == 4
    (result,) = _lead_tool_results(board)
    (child,) = json.loads(result)["children"]
    assert child["status"] == "failed" and "no-such-script" in child["error"]
    _nothing_running(board)


def test_child_that_times_out_is_reported_to_the_lead(board: BoardFiles) -> None:
    stuck = board.script("stuck", [{"text": "thinking", "delay_s": 600}])
    board.configure("[limits]\nchild_timeout_s = 1.0\nchild_max_attempts = 1\n"
                    f'[profiles.stuck]\nmodel = "{stuck}"\n')
    spec = _lead_script(board, [{"title": "never ends", "goal": "g", "profile": "stuck"}])
    # the lead answers, but a child it relied on failed: exit 4 (kanban/cli/exit_codes.py)
    assert _run(board, "--model", spec, check=False).returncode == 4
    (result,) = _lead_tool_results(board)
    (child,) = json.loads(result)["children"]
    assert child["status"] == "failed" and "timed out" in child["error"]
    _nothing_running(board)


def test_ctrl_c_hands_children_back_and_leaves_the_board_consistent(board: BoardFiles) -> None:
    slow = board.script("slow", slow_steps(1.0, heartbeats=60))
    board.configure(f'[profiles.slow]\nmodel = "{slow}"\n')
    spec = _lead_script(board, [{"title": f"slow {i}", "goal": "g", "profile": "slow"}
                                for i in range(2)])
    # A suite started in the background inherits SIGINT ignored; this child must feel Ctrl-C.
    proc = subprocess.Popen([*KANBAN, "--db", str(board.path), "run", GOAL, "--model", spec],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pids = wait_until(lambda: [p for (p,) in query(
        board.path, "SELECT r.pid FROM run r JOIN card c ON c.id = r.card_id AND "
        "c.claim_token = r.claim_token WHERE c.status = 'running' AND c.parent_id IS NOT NULL "
        "AND r.pid IS NOT NULL")] or None, timeout=60, what="children running")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    statuses = dict(query(board.path, "SELECT created_by = 'lead', status FROM card "
                                      "WHERE created_by = 'lead'"))
    assert statuses == {1: "waiting"}  # resumable (see test_waiting.py)
    kids = {s for (s,) in query(board.path, "SELECT status FROM card WHERE parent_id IS NOT "
                                            "NULL")}
    assert kids == {"ready"}  # handed back at once, no attempt spent
    for pid in pids:
        wait_until(lambda pid=pid: not Path(f"/proc/{pid}").exists() or
                   Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
                   timeout=30, what=f"worker {pid} gone")


def test_limit_flags_override_the_config(board: BoardFiles) -> None:
    board.configure("[limits]\nmax_children_per_call = 5\n")
    spec = _lead_script(board, [{"title": f"t{i}", "goal": "g"} for i in range(3)])
    _run(board, "--model", spec, "--max-children", "2", "--child-timeout", "30")
    (result,) = _lead_tool_results(board)
    assert "too many tasks in one call: 3 (the limit is 2)" in result
    spec = _lead_script(board, [{"title": "timed", "goal": "g"}])
    _run(board, "--model", spec, "--child-timeout", "30")
    assert query(board.path, "SELECT timeout_s FROM card WHERE title = 'timed'") == [(30.0,)]


def test_delegated_cards_stop_at_the_child_turn_limit(board: BoardFiles) -> None:
    chatty = board.script("chatty", [
        {"tool_calls": [{"name": "kanban_heartbeat", "arguments": {"note": f"turn {i}"}}]}
        for i in range(10)])
    board.configure(f'[limits]\nchild_max_turns = 2\n[profiles.chatty]\nmodel = "{chatty}"\n')
    spec = _lead_script(board, [{"title": "talks a lot", "goal": "g", "profile": "chatty"}])
    # the lead answers, but a child it relied on failed: exit 4 (kanban/cli/exit_codes.py)
    assert _run(board, "--model", spec, check=False).returncode == 4
    (result,) = _lead_tool_results(board)
    (child,) = json.loads(result)["children"]
    assert child["status"] == "failed" and "turn limit" in child["error"]
    beats = query(board.path, "SELECT count(*) FROM event WHERE kind = 'progress'")[0][0]
    assert beats == 2


def test_the_children_limit_holds_across_turns(board: BoardFiles) -> None:
    board.configure("[limits]\nmax_children_per_card = 4\nmax_children_per_call = 2\n")
    batch = [{"title": "a", "goal": "g"}, {"title": "b", "goal": "g"}]
    spec = board.script("lead", [
        *[{"tool_calls": [{"name": "delegate", "arguments": {"tasks": batch}}]}] * 3,
        {"text": "the lead is done"}])
    _run(board, "--model", spec)
    results = _lead_tool_results(board)
    assert len(results) == 3 and "limit of 4" in results[2], results[2]
    assert query(board.path, "SELECT count(*) FROM card WHERE parent_id = ?",
                 _lead_id(board)) == [(4,)]
    _nothing_running(board)


def test_a_lead_out_of_turns_is_not_done(board: BoardFiles) -> None:
    board.configure("[profiles.lead]\nmax_turns = 2\n")
    spec = board.script("lead", [
        *[{"tool_calls": [{"name": "delegate", "arguments": {
            "tasks": [{"title": f"t{i}", "goal": "g"}]}}]} for i in range(2)],
        {"text": "I ran out of turns"}])
    result = _run(board, "--model", spec, check=False)
    assert result.returncode != 0
    status, error = query(board.path, "SELECT status, error FROM card WHERE id = ?",
                          _lead_id(board))[0]
    assert status == "failed" and "turn limit" in error, (status, error)
