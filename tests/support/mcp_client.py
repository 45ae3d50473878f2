"""`kanban mcp` as a real subprocess (stdio or streamable HTTP), driven by the mcp SDK's
own client, as Claude Desktop or Cursor would drive it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, ReadResourceResult, TextResourceContents

from kanban.mcp_server.board import McpBoard
from kanban.mcp_server.server import build_server
from kanban.service import Kanban
from tests.support.procs import KANBAN

TOKEN = "mcp-test-token-0123456789abcdef"
START_TIMEOUT_S = 60.0


@asynccontextmanager
async def over_stdio(db: Path, *args: str, env: Mapping[str, str] | None = None
                     ) -> AsyncIterator[Client]:
    """A client session with `kanban --db DB mcp ARGS`, started as a subprocess."""
    params = StdioServerParameters(command=sys.executable,
                                   args=[*KANBAN[1:], "--db", str(db), "mcp", *args],
                                   env=dict(env or os.environ))
    async with Client(params) as client:
        yield client


@dataclass
class HttpMcp:
    """A running `kanban mcp --http`: its endpoint and the header it printed."""

    proc: subprocess.Popen[str]
    url: str  # http://127.0.0.1:PORT/mcp
    header: str  # "Authorization: Bearer TOKEN", as printed

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


def start_http(db: Path, *args: str, token: str | None = TOKEN,
               env: Mapping[str, str] | None = None) -> HttpMcp:
    """`kanban --db DB mcp --http --port 0 ARGS`; returns once both lines are printed."""
    command = [*KANBAN, "--db", str(db), "mcp", "--http", "--port", "0", *args]
    if token is not None:
        command += ["--token", token]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(env or os.environ))
    lines = _lines(proc, 2)
    return HttpMcp(proc, lines[0], lines[1])


def _lines(proc: subprocess.Popen[str], count: int) -> list[str]:
    """The first `count` lines of stdout (read by a thread: a selector cannot see what the
    text wrapper already buffered)."""
    assert proc.stdout is not None
    stdout = proc.stdout
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(stdout.readline().strip()
                                                          for _ in range(count)), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    if len(lines) < count or not all(lines):
        proc.kill()
        proc.wait(timeout=30)
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"kanban mcp --http printed {lines} and exited "
                             f"{proc.returncode}: {err}")
    return lines


@asynccontextmanager
async def over_http(url: str, token: str | None = TOKEN, *,
                    statuses: list[int] | None = None) -> AsyncIterator[Client]:
    """A client session with the server at `url`, sending the bearer token if given;
    `statuses` collects the HTTP status of every response."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    http = create_mcp_http_client(headers=headers)
    if statuses is not None:
        async def seen(response: Any) -> None:
            statuses.append(response.status_code)

        http.event_hooks["response"].append(seen)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def answer(result: CallToolResult) -> Any:
    """A successful tool call's JSON answer."""
    assert not result.is_error, result.content
    return json.loads(text_of(result))


def resource_text(result: ReadResourceResult) -> str:
    """A resource read's one text content."""
    (content,) = result.contents
    assert isinstance(content, TextResourceContents)
    return content.text


def text_of(result: CallToolResult) -> str:
    (content,) = result.content
    assert content.type == "text"
    return content.text


@asynccontextmanager
async def in_process(kb: Kanban, home: Path, board: str = "default") -> AsyncIterator[Client]:
    """A client session with the board's MCP server in this process (no transport)."""
    async with Client(build_server(McpBoard(kb, board, home))) as client:
        yield client


def call(kb: Kanban, home: Path, name: str, args: dict[str, Any]) -> CallToolResult:
    """One tool call through an in-process session."""
    async def once() -> CallToolResult:
        async with in_process(kb, home) as client:
            return await client.call_tool(name, args)

    return anyio.run(once)
