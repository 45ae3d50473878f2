"""What a hostile or broken model or provider can send ends as a classified run outcome with
a one-line reason (never a crash, never a traceback), within bounded storage."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_bodies import tool_results
from tests.support.llm_server import (
    LLMServer,
    Reply,
    garbage_reply,
    malformed_tool_reply,
    text_reply,
    tool_reply,
)
from tests.support.procs import kanban, query

PROVIDERS = ["openai", "anthropic"]
ESCAPES = "done \x1b]0;pwned\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \x9b31m \u202egnp.exe\x07"
KEY = "sk-echoed-" + "k3y" * 12


def configure(board: BoardFiles, provider: str, extra: str = "") -> None:
    board.configure(f'[profiles.worker]\nmodel = "{provider}:test-model"\n'
                    f'toolsets = ["kanban"]\nmax_turns = 6\n{extra}')


def dispatch(board: BoardFiles, server: LLMServer) -> Any:
    # 4: a card it ran is not done (kanban/cli/exit_codes.py); never a crash
    done = kanban(board.path, "dispatch", "--once", check=False,
                  env={**os.environ, **server.env(), "OPENAI_API_KEY": KEY,
                       "ANTHROPIC_API_KEY": KEY})
    assert done.returncode in (0, 4), done.stderr
    return done


def card_row(board: BoardFiles, card: int) -> tuple[str, str | None, str | None]:
    return query(board.path, "SELECT status, result, error FROM card WHERE id = ?", card)[0]


def worker_log(board: BoardFiles, card: int) -> str:
    return "".join(p.read_text() for p in (board.home / "logs").glob(f"{card}-*.log"))


def runs(board: BoardFiles, card: int) -> list[tuple[str, int | None]]:
    return query(board.path, "SELECT outcome, exit_code FROM run WHERE card_id = ? "
                             "ORDER BY id", card)


def db_bytes(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, size = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                       for p in ("page_count", "page_size"))
    return pages * size


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_200_that_is_not_json_is_a_classified_failure(board: BoardFiles,
                                                        provider: str) -> None:
    configure(board, provider)
    card = board.add("ask a broken proxy", profile="worker", max_attempts=1)
    board.kb.db.dispose()
    with LLMServer(responder=lambda body: garbage_reply()) as server:
        dispatch(board, server)
    status, _, error = card_row(board, card)
    assert status == "failed" and error and "\n" not in error, error
    assert error.startswith(f"{provider}:"), error
    assert runs(board, card)[0][1] in (0, 3)  # recorded by the worker, not a crash
    assert "Traceback" not in worker_log(board, card)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_with_terminal_escapes_completes_with_them_removed(board: BoardFiles,
                                                                 provider: str) -> None:
    configure(board, provider)
    card = board.add("say something nasty", profile="worker")
    with LLMServer(responder=lambda body: text_reply(ESCAPES)) as server:
        dispatch(board, server)
    status, result, _ = card_row(board, card)
    assert status == "done" and result and result.startswith("done"), result
    assert not any(c in result for c in "\x1b\x07\x9b\u202e"), repr(result)
    assert "Traceback" not in worker_log(board, card)


def test_malformed_json_a_huge_argument_and_a_thousand_calls_get_error_results(
        board: BoardFiles) -> None:
    configure(board, "openai")
    card = board.add("flood the worker", profile="worker")
    before = db_bytes(board.path)
    huge = "x" * (20 * 1024 * 1024)
    seen: list[list[str]] = []

    def respond(body: dict[str, Any]) -> Reply:
        seen.append(tool_results(body))
        step = len(seen)
        if step == 1:
            return malformed_tool_reply("kanban_comment")
        if step == 2:
            return tool_reply(("kanban_comment", {"body": huge}), chunk_chars=1 << 20,
                              usage=(1000, 1000, 0))
        if step == 3:
            return tool_reply(*[("kanban_heartbeat", {"note": f"n{i}"}) for i in range(1000)],
                              chunk_chars=1 << 16)
        return tool_reply(("kanban_complete", {"summary": "survived"}))

    with LLMServer(responder=respond) as server:
        dispatch(board, server)
    status, result, error = card_row(board, card)
    assert (status, result) == ("done", "survived"), error
    malformed, too_big = seen[1][-1], seen[2][-1]
    assert "not valid JSON" in malformed, malformed
    assert "too large" in too_big and "20,971,5" in too_big, too_big[:300]
    stored = [content for (content,) in query(board.path, "SELECT content FROM message "
                                                           "WHERE role = 'tool' ORDER BY seq")]
    refused = [c for c in stored if "tool calls in one turn" in c]
    assert len(refused) == 1000 - 64 and len(stored) == 2 + 1000 + 1, len(stored)
    grown = db_bytes(board.path) - before
    assert grown < 1_000_000, grown
    log = kanban(board.path, "log", str(card)).stdout
    assert "cut" in log and len(log) < 1_000_000


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_echoed_key_is_stored_redacted(board: BoardFiles, provider: str) -> None:
    import base64

    configure(board, provider)
    card = board.add("leak it", profile="worker")
    encoded = base64.b64encode(KEY.encode()).decode()

    def respond(body: dict[str, Any]) -> Reply:
        if not tool_results(body):
            return tool_reply(("kanban_comment", {"body": f"the key is {KEY}"}),
                              text=f"my key: {KEY} and {encoded}")
        return tool_reply(("kanban_complete", {"summary": f"done; key {KEY}",
                                               "result": f"b64 {encoded}"}))

    with LLMServer(responder=respond) as server:
        dispatch(board, server)
    assert card_row(board, card)[0] == "done"
    stored = json.dumps([
        query(board.path, "SELECT content, tool_calls, reasoning FROM message"),
        query(board.path, "SELECT title, result, error FROM card"),
        query(board.path, "SELECT body FROM comment"),
        query(board.path, "SELECT data FROM event"),
    ])
    assert "[redacted]" in stored
    assert KEY not in stored and encoded not in stored
    for command in (("log", str(card)), ("show", str(card))):
        out = kanban(board.path, *command).stdout
        assert KEY not in out and encoded not in out


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_card_that_runs_out_of_turns_is_not_done(board: BoardFiles, provider: str) -> None:
    configure(board, provider)
    card = board.add("never finish", profile="worker", max_attempts=1)

    def respond(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            return tool_reply(("kanban_heartbeat", {"note": "still going"}))
        return text_reply("I ran out of turns; the summary is this text")

    with LLMServer(responder=respond) as server:
        dispatch(board, server)
    status, _, error = card_row(board, card)
    assert status == "failed" and error and "turn limit" in error, (status, error)


def test_a_cards_transcript_stays_within_its_cap(board: BoardFiles) -> None:
    show = {"tool_calls": [{"name": "kanban_show", "arguments": {}}]}
    spec = board.script("reader", [*[show] * 30, {"tool_calls": [
        {"name": "kanban_complete", "arguments": {"summary": "read it all"}}]}])
    board.configure(f'[profiles.reader]\nmodel = "{spec}"\nmax_turns = 40\n'
                    "max_message_chars = 4000\nmax_transcript_chars = 40000\n"
                    "token_budget = 10000000\ncontext_window = 2000000\n")
    card = board.add("read a long goal", profile="reader", goal="g" * 19_000)
    kanban(board.path, "dispatch", "--once")
    assert card_row(board, card)[:2] == ("done", "read it all")
    sizes = query(board.path, "SELECT role, length(coalesce(content, '')) + "
                              "length(coalesce(tool_calls, '')) FROM message ORDER BY seq")
    results = [size for role, size in sizes if role == "tool"]
    assert len(results) == 31 and sum(size for _, size in sizes) < 40_000 + 2 * 4_000
    assert max(results[:20]) <= 1_000  # the older ones were stored cut
    assert "characters cut" in kanban(board.path, "log", str(card)).stdout


def test_a_lead_answering_with_escapes_finishes_its_card(board: BoardFiles) -> None:
    spec = board.script("lead", [{"text": ESCAPES}])
    run = kanban(board.path, "run", "say it", "--model", spec, check=False)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    status, result, _ = query(board.path, "SELECT status, result, error FROM card "
                                          "WHERE created_by = 'lead'")[0]
    assert status == "done" and result and result.startswith("done"), (status, result)
    assert not any(c in result for c in "\x1b\x07\x9b\u202e")
    assert not any(c in run.stdout for c in "\x1b\x07\x9b\u202e"), repr(run.stdout)
