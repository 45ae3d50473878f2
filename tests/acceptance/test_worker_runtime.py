"""Workers as real processes with the grown-up agent loop: fallbacks, reasoning in the
transcript, cost and `max_cost`, user hooks from config, live activity on the board, and
a cancel that stops a streaming call."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import (
    LLMServer,
    Reply,
    called_tools,
    server_error,
    text_reply,
    tool_reply,
)
from tests.support.procs import KANBAN, kanban, query, start_dispatcher, stop, wait_until

HOOKS = '''
"""Hooks for the acceptance tests (loaded by workers from config.toml)."""
import time
from pathlib import Path

RELEASE = Path(RELEASE_PATH)  # workers get a scrubbed environment: the path is written in


def hold(event):
    """Keep kanban_show running until the test creates the release file."""
    if event.call.name == "kanban_show":
        deadline = time.monotonic() + 60
        while not RELEASE.exists() and time.monotonic() < deadline:
            time.sleep(0.02)


def guard(event):
    if event.call.name == "kanban_comment":
        return "comments are closed today (card #%s)" % event.context["card_id"]


def broken(event):
    raise ValueError("this hook is broken")
'''


@pytest.fixture
def hook_env(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "hookmods"
    folder.mkdir()
    release = tmp_path / "release"
    code = textwrap.dedent(HOOKS).replace("RELEASE_PATH", repr(str(release)))
    (folder / "testhooks.py").write_text(code)
    return {"PYTHONPATH": str(folder), "HOOK_RELEASE": str(release)}


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as llm:
        yield llm


def run_board(board: BoardFiles, env: dict[str, str], until: Any, what: str,
              tmp_path: Path) -> None:
    dispatcher = start_dispatcher(board.path, "--max-workers", "2", env={**os.environ, **env},
                                  log=tmp_path / "dispatch.log")
    try:
        wait_until(until, timeout=60, what=what)
    finally:
        stop(dispatcher)


def exited(board: BoardFiles, card_id: int) -> bool:
    """The card's last worker has exited and its dispatcher recorded the exit."""
    return query(board.path, "SELECT exit_code IS NOT NULL FROM run WHERE card_id = ? "
                 "ORDER BY id DESC LIMIT 1", card_id) == [(1,)]


def status(board: BoardFiles, card_id: int) -> str:
    return query(board.path, "SELECT status FROM card WHERE id = ?", card_id)[0][0]


def test_a_primary_failing_forever_hands_the_card_to_the_fallback(
        board: BoardFiles, server: LLMServer, tmp_path: Path) -> None:
    def model(body: dict[str, Any]) -> Reply:
        if body["model"] == "primary-model":
            return server_error(500)  # forever
        if "kanban_complete" in called_tools(body):
            return text_reply("finished")
        return tool_reply(("kanban_complete", {"summary": "done by the backup"}),
                          reasoning="The primary is down, so I finish it myself.")

    server.responder = model
    board.configure('[limits]\nlease_s = 5\n[profiles.default]\nmodel = "openai:primary-model"\n'
                    'fallback = ["anthropic:backup-model"]\n')
    card = board.add("survive an outage")
    zero_wait = {"retry-after": "0"}
    server.enqueue(*[Reply(status=500, error_message="down", headers=zero_wait)] * 6)
    run_board(board, server.env(), lambda: status(board, card) == "done", "card done",
              tmp_path)
    routes = [r.route for r in server.requests]
    assert routes[:6] == ["openai"] * 6 and set(routes[6:]) == {"anthropic"}
    models = query(board.path, "SELECT m.model FROM message m JOIN run r ON r.id = m.run_id "
                               "WHERE r.card_id = ? AND m.role = 'assistant'", card)
    assert models == [("anthropic:backup-model",)]
    (event,) = query(board.path, "SELECT data FROM event WHERE card_id = ? AND "
                                 "kind = 'model_fallback'", card)
    data = json.loads(event[0])
    assert data["old"] == "openai:primary-model" and data["new"] == "anthropic:backup-model"
    assert "HTTP 500" in data["reason"]
    # The reasoning is in the transcript, shown on request.
    shown = kanban(board.path, "log", str(card), "--reasoning",
                   env={**os.environ, "COLUMNS": "200"}).stdout
    assert "The primary is down, so I finish it myself." in shown
    assert "(anthropic:backup-model)" in shown
    brief = kanban(board.path, "log", str(card), env={**os.environ, "COLUMNS": "200"}).stdout
    assert "The primary is down" not in brief and "--reasoning shows it" in brief
    logged = json.loads(kanban(board.path, "log", str(card), "--json").stdout)
    (answer,) = [m for m in logged["runs"][0]["messages"] if m["role"] == "assistant"]
    assert answer["reasoning"] == "The primary is down, so I finish it myself."


def test_max_cost_stops_a_card_and_cost_is_shown(board: BoardFiles, server: LLMServer,
                                                 tmp_path: Path) -> None:
    def model(body: dict[str, Any]) -> Reply:
        return replace_usage(tool_reply(("kanban_heartbeat", {"note": "working"})))

    server.responder = model
    board.configure('[profiles.default]\nmodel = "openai:gpt-4o"\nmax_cost = 0.5\n'
                    'token_budget = 100000000\n'
                    '[prices."openai:gpt-4o"]\ninput = 0.2\noutput = 1.0\n')
    card = board.add("spend money")
    run_board(board, server.env(), lambda: status(board, card) == "failed", "card failed",
              tmp_path)
    detail = json.loads(kanban(board.path, "show", str(card), "--json").stdout)
    # Each call: 1M input tokens at $0.20 (the config's price, not the list price).
    assert detail["card"]["cost"] == pytest.approx(0.6)
    assert detail["runs"][0]["cost"] == pytest.approx(0.6)
    assert detail["card"]["error"].startswith(
        "cost budget reached ($0.6000 spent of max_cost $0.5000) before the card was finished")
    usage = query(board.path, "SELECT model, cost FROM usage")
    assert usage == [("openai:gpt-4o", pytest.approx(0.2))] * 3
    text = kanban(board.path, "show", str(card), env={**os.environ, "COLUMNS": "200"}).stdout
    assert "cost $0.6000" in text
    # The model was warned of 70% ($0.35) and 90% ($0.45) of the budget a turn ahead, at the
    # pace of $0.20 a turn: at $0.20 (next $0.40) and $0.40 (next $0.60), not after passing.
    results = [json.loads(r[0]) if r[0].startswith("{") else r[0] for r in query(
        board.path, "SELECT content FROM message WHERE role = 'tool' ORDER BY id")]
    warned = [r for r in results if "budget warning" in str(r)]
    assert len(warned) == 2 and "(40%; the next turn may pass 70%)" in str(warned[0])
    assert "(80%; the next turn may pass 90%)" in str(warned[1])


def replace_usage(reply: Reply) -> Reply:
    from dataclasses import replace

    return replace(reply, usage=(1_000_000, 0, 0))


def test_hooks_from_config_veto_and_fail_safely(board: BoardFiles, hook_env: dict[str, str],
                                                tmp_path: Path) -> None:
    spec = board.script("hooked", [
        {"tool_calls": [{"name": "kanban_comment", "arguments": {"body": "hello"}}]},
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "ok"}}]},
    ])
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n'
                    '[hooks]\npre_tool = ["testhooks:guard"]\non_turn = ["testhooks:broken"]\n')
    card = board.add("hooked card")
    # The worker's exit recorded: the last turn's on_turn runs after the card is done.
    run_board(board, hook_env, lambda: status(board, card) == "done" and exited(board, card),
              "card done and its worker gone", tmp_path)
    vetoed = query(board.path, "SELECT content FROM message WHERE name = 'kanban_comment'")
    assert vetoed == [(f"not run: comments are closed today (card #{card})",)]
    assert query(board.path, "SELECT count(*) FROM comment") == [(0,)]
    errors = query(board.path, "SELECT data FROM event WHERE kind = 'hook_error'")
    assert len(errors) == 2  # on_turn after each of the two turns
    assert json.loads(errors[0][0]) == {"hook": "testhooks:broken",
                                        "error": "ValueError: this hook is broken"}


def test_a_missing_hook_fails_the_card_clearly(board: BoardFiles, tmp_path: Path) -> None:
    board.configure('[hooks]\npre_tool = ["no_such_hook_module:check"]\n')
    card = board.add("bad hook")
    run_board(board, {}, lambda: status(board, card) == "failed", "card failed", tmp_path)
    error = query(board.path, "SELECT error FROM card WHERE id = ?", card)[0][0]
    assert error.startswith("cannot load hook 'no_such_hook_module:check'")


def test_the_board_shows_a_running_workers_current_tool(
        board: BoardFiles, hook_env: dict[str, str], tmp_path: Path) -> None:
    board.configure('[profiles.default]\nmodel = "scripted:demo"\n'
                    '[hooks]\npre_tool = ["testhooks:hold"]\n')
    card = board.add("watch me")
    dispatcher = start_dispatcher(board.path, env={**os.environ, **hook_env},
                                  log=tmp_path / "dispatch.log")
    watch = Watch(board.path)
    try:
        frame = watch.until(lambda screen: "▸ kanban_show" in screen, "the tool on the board")
        assert f"#{card}" in frame and "t1/20" in frame
        Path(hook_env["HOOK_RELEASE"]).touch()
        wait_until(lambda: status(board, card) == "done", timeout=60, what="card done")
    finally:
        watch.close()
        stop(dispatcher)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Watch:
    """`kanban board --watch` in a pseudo-terminal, read as the screen changes."""

    def __init__(self, db: Path) -> None:
        master, slave = pty.openpty()
        env = {**os.environ, "COLUMNS": "160", "LINES": "40", "TERM": "xterm"}
        # SIGINT stops the watch: a suite started in the background passes it on ignored.
        self.proc = subprocess.Popen([*KANBAN, "--db", str(db), "board", "--watch"],
                                     stdin=slave, stdout=slave, stderr=slave, env=env,
                                     close_fds=True, preexec_fn=_default_sigint)
        os.close(slave)
        self.master = master
        os.set_blocking(master, False)
        self.seen = ""

    def until(self, done: Any, what: str) -> str:
        def read() -> str | None:
            try:
                while chunk := os.read(self.master, 65536):
                    self.seen += chunk.decode(errors="replace")
            except (BlockingIOError, OSError):
                pass
            plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.seen)
            return plain if done(plain) else None

        return wait_until(read, timeout=30, what=what)

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        finally:
            os.close(self.master)


def test_cancelling_a_card_stops_its_streaming_call(board: BoardFiles, server: LLMServer,
                                                    tmp_path: Path) -> None:
    server.enqueue(text_reply("word " * 1200, chunk_chars=5, chunk_delay=0.05))  # ~60 s
    board.configure('[profiles.default]\nmodel = "openai:test-model"\n')
    card = board.add("talk for a long time")
    dispatcher = start_dispatcher(board.path, env={**os.environ, **server.env()},
                                  log=tmp_path / "dispatch.log")
    try:
        server.wait_for_requests(1, timeout=60)
        wait_until(lambda: "model" in (query(board.path, "SELECT activity FROM run WHERE "
                                                         "card_id = ?", card)[0][0] or ""),
                   timeout=30, what="the worker streaming")
        kanban(board.path, "cancel", str(card))
        server.wait_for_abort(timeout=15)  # the worker hung up on the stream
        wait_until(lambda: query(board.path, "SELECT exit_code FROM run WHERE card_id = ?",
                                 card)[0][0] is not None, timeout=30, what="the worker gone")
    finally:
        stop(dispatcher)
    assert status(board, card) == "cancelled"
    assert query(board.path, "SELECT count(*) FROM message WHERE role = 'assistant'") == [(0,)]


def test_kanban_run_json_reports_the_answer_and_cost(board: BoardFiles) -> None:
    proc = kanban(board.path, "run", "Explain the write-ahead log", "--json")
    data = json.loads(proc.stdout)  # stdout holds the JSON alone; progress went to stderr
    assert data["answer"].startswith("Answer for: Explain the write-ahead log")
    assert data["stop_reason"] == "completed" and data["cost"] == 0.0
    assert data["total_cost"] == 0.0 and data["usage"]["input_tokens"] > 0
    assert len(data["children"]) == 3
    assert all(c["status"] == "done" and "cost" in c for c in data["children"])
    assert "lead #" in proc.stderr
