"""`kanban mcp` driven by the mcp SDK's own client, over stdio and streamable HTTP, as a
real subprocess: a card added through it is worked by a real dispatcher (the offline
scripted model) and its result read back; stored hostile text comes back spelled out
and bounded; the HTTP transport refuses a client without the token."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.acceptance.conftest import BoardFiles
from tests.support.mcp_client import (
    HttpMcp,
    answer,
    over_http,
    over_stdio,
    resource_text,
    start_http,
    text_of,
)
from tests.support.procs import kanban, start_dispatcher, stop

TOOLS = {"add_card", "list_cards", "search_cards", "show_card", "read_board", "comment",
         "approve_command", "deny_command", "accept_review", "send_back_review", "start_lead"}
NASTY = "t\x1b]0;pwned\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \x9b31m \u202etxt.exe \r\x07 \x85"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def http_server(board: BoardFiles) -> Any:
    server = start_http(board.path)
    yield server
    assert server.stop() in (0, 130)  # Ctrl-C: 130, as every command


async def _dispatch_once(db: Path) -> None:
    await anyio.to_thread.run_sync(lambda: kanban(db, "dispatch", "--once"))


async def _add_work_and_read(client: Client, db: Path) -> dict[str, Any]:
    """Add a card through the client, let a dispatcher work it, read it back."""
    assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
    added = answer(await client.call_tool("add_card", {"title": "greet", "goal": "say hello",
                                                       "key": "greet-1"}))
    assert added["created"] is True and added["card"]["status"] == "ready"
    card_id = added["card"]["id"]
    again = answer(await client.call_tool("add_card", {"title": "greet", "key": "greet-1"}))
    assert again == {**again, "created": False} and again["card"]["id"] == card_id
    await _dispatch_once(db)
    shown = answer(await client.call_tool("show_card", {"card_id": card_id}))
    assert shown["card"]["status"] == "done"
    assert shown["card"]["result"] == "Done: say hello"
    listed = answer(await client.call_tool("list_cards", {"statuses": ["done"]}))
    assert [c["id"] for c in listed["cards"]] == [card_id]
    board = answer(await client.call_tool("read_board", {}))
    assert board["counts"]["done"] == 1
    read = await client.read_resource(f"kanban://cards/{card_id}")
    assert json.loads(resource_text(read))["card"]["result"] == "Done: say hello"
    return shown


def test_a_stdio_client_adds_a_card_a_dispatcher_works_and_reads_its_result(
        board: BoardFiles) -> None:
    async def scenario() -> None:
        async with over_stdio(board.path) as client:
            await _add_work_and_read(client, board.path)
            commented = answer(await client.call_tool("comment", {"card_id": 1,
                                                                  "body": "thanks"}))
            assert commented["card_id"] == 1
            found = answer(await client.call_tool("search_cards", {"query": "thanks"}))
            assert [h["card_id"] for h in found["hits"]] == [1]

    anyio.run(scenario)
    author, body = sqlite3.connect(board.path).execute(
        "SELECT author, body FROM comment ORDER BY id DESC LIMIT 1").fetchone()
    assert (author, body) == ("mcp", "thanks")


def test_an_http_client_with_the_token_adds_works_and_reads(board: BoardFiles,
                                                           http_server: HttpMcp) -> None:
    assert http_server.header.endswith("Bearer mcp-test-token-0123456789abcdef")

    async def scenario() -> None:
        async with over_http(http_server.url) as client:
            await _add_work_and_read(client, board.path)

    anyio.run(scenario)


def test_a_lead_started_through_http_answers_in_its_card(board: BoardFiles,
                                                         http_server: HttpMcp,
                                                         tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with over_http(http_server.url) as client:
            lead = answer(await client.call_tool("start_lead",
                                                 {"goal": "plan a small party"}))
            dispatcher = start_dispatcher(board.path, log=tmp_path / "d.log")
            try:
                with anyio.fail_after(120):
                    while True:
                        shown = answer(await client.call_tool("show_card",
                                                              {"card_id": lead["card_id"]}))
                        if shown["card"]["status"] in ("done", "failed"):
                            return shown
                        await anyio.sleep(0.1)
            finally:
                await anyio.to_thread.run_sync(stop, dispatcher)

    shown = anyio.run(scenario)
    assert shown["card"]["status"] == "done" and shown["card"]["role"] == "orchestrator"
    assert shown["card"]["result"] and len(shown["children"]) >= 1


def test_http_without_the_token_is_refused(http_server: HttpMcp) -> None:
    async def connect(token: str | None, statuses: list[int]) -> None:
        async with over_http(http_server.url, token=token, statuses=statuses) as client:
            await client.list_tools()

    for token in (None, "wrong-token-0123456789abcdef"):
        statuses: list[int] = []
        with pytest.raises(ExceptionGroup, match="TaskGroup") as refused:
            anyio.run(connect, token, statuses)
        assert refused.group_contains(MCPError)
        assert statuses and set(statuses) == {401}
    response = httpx.post(http_server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def _store_hostile(board: BoardFiles) -> int:
    """A card whose stored text carries escapes and a huge result (an older version's data,
    or text written past the input filter), straight into the file."""
    card = board.add("clean title", goal="g")
    with sqlite3.connect(board.path) as conn:
        conn.execute("UPDATE card SET title = ?, goal = ?, result = ?, status = 'done' "
                     "WHERE id = ?", (NASTY * 100, NASTY, NASTY + "x" * 200_000, card))
        conn.execute("INSERT INTO comment (card_id, author, body, at) VALUES "
                     "(?, ?, ?, '2026-01-01 00:00:00')", (card, NASTY, NASTY))
    return card


def test_hostile_stored_text_comes_back_spelled_out_and_bounded(board: BoardFiles) -> None:
    card = _store_hostile(board)

    async def scenario() -> list[str]:
        async with over_stdio(board.path) as client:
            texts = [text_of(await client.call_tool(name, args)) for name, args in (
                ("show_card", {"card_id": card}), ("list_cards", {}), ("read_board", {}),
                ("search_cards", {"query": "pwned"}))]
            read = await client.read_resource(f"kanban://cards/{card}")
            return [*texts, resource_text(read)]

    texts = anyio.run(scenario)
    for text in texts:
        assert not RAW_CONTROL.search(text), RAW_CONTROL.findall(text)
        assert len(text) < 60_000
        assert not RAW_CONTROL.search(json.dumps(json.loads(text), ensure_ascii=False))
    shown = json.loads(texts[0])
    assert "\\x1b]0;pwned" in shown["card"]["goal"] and "\\u202e" in shown["card"]["goal"]
    assert "characters cut" in shown["card"]["result"] and len(shown["card"]["result"]) < 17_000
    assert len(shown["card"]["title"]) < 1_000
    assert "\\x1b" in shown["comments"][-1]["body"]


def test_a_hostile_title_is_refused_with_an_escaped_bounded_error(board: BoardFiles) -> None:
    async def scenario() -> list[tuple[bool, str]]:
        async with over_stdio(board.path) as client:
            results = [await client.call_tool("add_card", {"title": title}) for title in
                       (NASTY, "\x1b[31m" * 50_000, "x" * 600)]
            return [(bool(r.is_error), text_of(r)) for r in results]

    for is_error, text in anyio.run(scenario):
        assert is_error and not RAW_CONTROL.search(text) and len(text) < 2_000, text
    assert sqlite3.connect(board.path).execute("SELECT count(*) FROM card").fetchone() == (0,)
