"""Workers doing real work through real dispatchers, workers and SDK clients: files and
commands in their workspace, escapes refused, dangerous commands denied, asked and approved."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply, tool_results
from tests.support.procs import PATIENT_S, kanban, query, start_dispatcher, stop, wait_until

PROVIDERS = ["openai", "anthropic"]
DANGEROUS = "echo approved-run > proof.txt; git push --force origin main"


def turns(body: dict[str, Any]) -> int:
    """Assistant turns so far in this conversation (either wire format)."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def configure(board: BoardFiles, provider: str, *, approval: str, outside: Path) -> None:
    board.configure(f"""
[profiles.worker]
model = "{provider}:test-model"
toolsets = ["kanban", "file", "terminal"]
approval = "{approval}"
""")
    outside.mkdir(exist_ok=True)


def dispatch_once(board: BoardFiles, server: LLMServer) -> None:
    # 4: a card it ran is not done (blocked, failed, cancelled): kanban/cli/exit_codes.py
    done = kanban(board.path, "dispatch", "--once", env={**os.environ, **server.env()},
                  check=False)
    assert done.returncode in (0, 4), done.stderr


def files_worker(outside: Path):  # type: ignore[no-untyped-def]
    """Write, read back, escape three ways, run a command, complete with its output."""

    def respond(body: dict[str, Any]) -> Reply:
        step = turns(body)
        if step == 0:
            return tool_reply(("write_file", {"path": "notes/hello.txt",
                                              "content": "hello from the agent\n"}))
        if step == 1:
            return tool_reply(("read_file", {"path": "notes/hello.txt"}))
        if step == 2:
            return tool_reply(("terminal", {"command": f"ln -s {outside} door"}),
                              ("write_file", {"path": "../escape.txt", "content": "x"}),
                              ("write_file", {"path": f"{outside}/abs.txt", "content": "x"}),
                              ("write_file", {"path": "door/evil.txt", "content": "x"}))
        if step == 3:
            return tool_reply(("terminal", {"command": "wc -c < notes/hello.txt; "
                                                       "echo MARKER-$((6 * 7))"}))
        if step == 4:
            output = tool_results(body)[-1]
            return tool_reply(("kanban_complete", {"summary": f"ran it: {output}"}))
        return text_reply("done")

    return respond


def tool_messages(board: BoardFiles, card_id: int) -> list[tuple[str, str]]:
    return [(name, content) for name, content in query(board.path, """
        SELECT m.name, m.content FROM message m JOIN run r ON r.id = m.run_id
        WHERE r.card_id = ? AND m.role = 'tool' ORDER BY r.id, m.seq""", card_id)]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_worker_writes_reads_and_runs_and_cannot_escape(board: BoardFiles, provider: str,
                                                          tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    configure(board, provider, approval="ask", outside=outside)
    card = board.add("write and run", profile="worker")
    with LLMServer(responder=files_worker(outside)) as server:
        dispatch_once(board, server)
    status, result = query(board.path, "SELECT status, result FROM card WHERE id = ?",
                           card)[0]
    assert status == "done", result
    assert "exit code 0" in result and "21" in result and "MARKER-42" in result
    workspace = Path(kanban(board.path, "workspace", str(card)).stdout.strip())
    assert workspace == board.home / "workspaces" / "default" / str(card)
    assert (workspace / "notes" / "hello.txt").read_text() == "hello from the agent\n"
    results = tool_messages(board, card)
    assert "1\thello from the agent" in results[1][1]
    escapes = [content for name, content in results[3:6]]
    assert all("refused" in content for content in escapes), escapes
    assert list(outside.iterdir()) == []
    assert not (workspace.parent / "escape.txt").exists()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_deny_refuses_a_dangerous_command(board: BoardFiles, provider: str,
                                          tmp_path: Path) -> None:
    configure(board, provider, approval="deny", outside=tmp_path / "o")
    card = board.add("push it", profile="worker")
    with LLMServer(responder=dangerous_worker) as server:
        dispatch_once(board, server)
    status, result = query(board.path, "SELECT status, result FROM card WHERE id = ?",
                           card)[0]
    assert status == "done" and "dangerous-command rule 'force push'" in result
    assert not (board.home / "workspaces" / "default" / str(card) / "proof.txt").exists()


def _opening_text(body: dict[str, Any]) -> str | None:
    """The text of the user turn the model answers (the card's first prompt, or the notes
    after a resumed conversation); None when it holds only tool results."""
    last = body.get("messages", [])[-1]
    content = last.get("content")
    if last.get("role") != "user":
        return None
    if isinstance(content, str):
        return content
    texts = [b.get("text", "") for b in content if b.get("type") == "text"]
    return "\n".join(texts) or None  # Anthropic: text beside the tool results


def dangerous_worker(body: dict[str, Any]) -> Reply:
    """Runs the command when it starts and again when its resumed conversation brings news
    (a person's decision); then completes with what the command gave."""
    if turns(body) == 0 or _opening_text(body) is not None:
        return tool_reply(("terminal", {"command": DANGEROUS}))
    return tool_reply(("kanban_complete", {"summary": "result: " + tool_results(body)[-1]}))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ask_blocks_then_approve_runs_it_on_the_next_attempt(board: BoardFiles, provider: str,
                                                             tmp_path: Path) -> None:
    configure(board, provider, approval="ask", outside=tmp_path / "o")
    card = board.add("push it", profile="worker")
    proof = board.home / "workspaces" / "default" / str(card) / "proof.txt"
    with LLMServer(responder=dangerous_worker) as server:
        dispatch_once(board, server)
        status, error = query(board.path, "SELECT status, error FROM card WHERE id = ?",
                              card)[0]
        assert status == "blocked" and DANGEROUS in error and not proof.exists()
        snapshot = json.loads(kanban(board.path, "board", "--json").stdout)
        assert snapshot["pending_approvals"] == [{"card_id": card, "command": DANGEROUS}]
        assert "pending approval" in kanban(board.path, "board",
                                            env={**os.environ, "COLUMNS": "200"}).stdout
        shown = json.loads(kanban(board.path, "show", str(card), "--json").stdout)
        assert [a["decision"] for a in shown["approvals"]] == ["pending"]
        assert f"#{card} approved" in kanban(board.path, "approve", str(card)).stdout
        dispatch_once(board, server)
    status, result = query(board.path, "SELECT status, result FROM card WHERE id = ?",
                           card)[0]
    assert status == "done" and "exit code" in result
    assert proof.read_text() == "approved-run\n"
    kinds = [k for (k,) in query(board.path, "SELECT kind FROM event WHERE card_id = ? AND "
                                             "kind LIKE '%approv%' OR kind LIKE 'command_%' "
                                             "ORDER BY id", card)]
    assert kinds == ["approval_requested", "approval_approved", "command_allowed"]


def test_deny_by_a_person_is_shown_to_the_next_attempt(board: BoardFiles,
                                                        tmp_path: Path) -> None:
    configure(board, "openai", approval="ask", outside=tmp_path / "o")
    card = board.add("push it", profile="worker")
    with LLMServer(responder=dangerous_worker) as server:
        dispatch_once(board, server)
        kanban(board.path, "deny", str(card), "--reason", "not on main")
        dispatch_once(board, server)
        prompts = [text for r in server.requests if (text := _opening_text(r.body))]
    assert "A person denied this command" in prompts[-1] and "not on main" in prompts[-1]
    result = query(board.path, "SELECT result FROM card WHERE id = ?", card)[0][0]
    assert "denied this exact command (not on main)" in result


def _alive(seconds: str) -> bool:
    """Is a `sleep SECONDS` alive? Found by its command line: in a sandbox the command's
    own `$!` is a PID of its namespace, not of the host."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if argv[:2] == [b"sleep", seconds.encode()] and state not in ("Z", "X"):
            return True
    return False


def _long_command_card(board: BoardFiles, **card: Any) -> tuple[int, Path, str]:
    seconds = f"{300 + uuid.uuid4().int % 10_000}"  # this test's sleeps, by command line
    spec = board.script("sleeper", [
        {"tool_calls": [{"name": "terminal", "arguments": {
            "command": f"sleep {seconds} & echo $! > bg.pid; sleep 300", "timeout_s": 600}}]},
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "slept"}}]}])
    board.configure(f'[profiles.sleeper]\nmodel = "{spec}"\ntoolsets = ["kanban", "terminal"]\n')
    card_id = board.add("sleep a lot", profile="sleeper", **card)
    return card_id, board.home / "workspaces" / "default" / str(card_id) / "bg.pid", seconds


def test_cancelling_a_card_kills_its_commands(board: BoardFiles, tmp_path: Path) -> None:
    card, pid_file, background = _long_command_card(board)
    dispatcher = start_dispatcher(board.path, log=tmp_path / "d.log")
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=60,
                   what="the command running")
        # bg.pid is written once the shell forked; the child may not have become `sleep` yet
        wait_until(lambda: _alive(background), timeout=PATIENT_S, what="the sleep started")
        kanban(board.path, "cancel", str(card))
        wait_until(lambda: not _alive(background), timeout=30, what="the command killed")
    finally:
        stop(dispatcher)
    assert query(board.path, "SELECT status FROM card WHERE id = ?", card) == [("cancelled",)]


def test_a_card_timeout_kills_its_commands(board: BoardFiles, tmp_path: Path) -> None:
    card, pid_file, background = _long_command_card(board, timeout_s=6.0, max_attempts=1)
    dispatcher = start_dispatcher(board.path, log=tmp_path / "d.log")
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=60,
                   what="the command running")
        wait_until(lambda: not _alive(background), timeout=60, what="the command killed")
        wait_until(lambda: query(board.path, "SELECT status FROM card WHERE id = ?",
                                 card)[0][0] in ("done", "failed"), timeout=60,
                   what="the card settled")
    finally:
        stop(dispatcher)
    tool = query(board.path, """SELECT m.content FROM message m JOIN run r ON r.id = m.run_id
        WHERE r.card_id = ? AND m.name = 'terminal'""", card)
    # The command's deadline is the card's: it is killed before the dispatcher's timeout.
    assert tool and "timed out" in tool[0][0], tool
