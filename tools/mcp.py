"""MCP servers as toolsets: `mcp:NAME` gives a worker server NAME's tools as `NAME__tool`.

The official `mcp` SDK is asynchronous; a worker is not. `McpServers` runs one private
event loop in a daemon thread, starts each server the first time a worker needs it (stdio
command, or streamable HTTP url), and answers tool calls synchronously with a timeout. A
server that crashes or hangs costs an error result, never the worker: the next call starts
it again. Everything here, the SDK included, is imported only by workers that use MCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from kanban.agent.types import ToolResult
from kanban.state.config import McpServer
from kanban.state.errors import KanbanError
from kanban.tools.registry import TOOL_NAME, Tool
from kanban.tools.schema import check_schema

SEPARATOR = "__"
Wrap = Callable[[Sequence[str], Path], list[str]]  # a runner's: argv as started in a cwd
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_LOOSE_SCHEMA: dict[str, Any] = {"type": "object"}


class McpError(KanbanError):
    """An MCP server could not be started or listed."""


class _Connection:
    """One server's session, owned by a task of the private loop."""

    def __init__(self, server: McpServer, cwd: Path, env: Mapping[str, str],
                 wrap: Wrap) -> None:
        self.server = server
        self.cwd = cwd
        self.env = env
        self.wrap = wrap
        self.session: Any = None
        self.broken = False
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> list[Any]:
        """Open the session and list the server's tools (within the startup timeout)."""
        ready: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._serve(ready))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.server.startup_timeout_s)
        except TimeoutError:
            await self.stop()
            raise McpError(f"MCP server {self.server.name!r} did not start within "
                           f"{self.server.startup_timeout_s:g}s") from None

    async def _serve(self, ready: asyncio.Future[list[Any]]) -> None:
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                read, write = await self._transport(stack)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listing = await _all_tools(session)
                self.session = session
                ready.set_result(listing)
                assert self._stop is not None
                await self._stop.wait()
        except BaseException as exc:  # reported to whoever waits on `ready`
            if not ready.done():
                ready.set_exception(McpError(f"MCP server {self.server.name!r} failed to "
                                             f"start: {_describe(exc)}"))
        finally:
            self.session = None
            self.broken = True

    async def _transport(self, stack: AsyncExitStack) -> Any:
        """The (read, write) streams of the server, closed with `stack`."""
        if self.server.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = await stack.enter_async_context(
                create_mcp_http_client(headers=dict(self.server.headers) or None))
            return await stack.enter_async_context(
                streamable_http_client(self.server.url, http_client=client))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        # A stdio server is a command like the terminal's: started through the same sandbox.
        argv = self.wrap([self.server.command or "", *self.server.args], self.cwd)
        params = StdioServerParameters(command=argv[0], args=argv[1:],
                                       env={**self.env, **self.server.env}, cwd=self.cwd)
        return await stack.enter_async_context(stdio_client(params, errlog=sys.stderr))

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 10)
            except (TimeoutError, Exception):  # stopping must not raise
                self._task.cancel()


async def _all_tools(session: Any) -> list[Any]:
    from mcp.types import PaginatedRequestParams

    tools, cursor = [], None
    while True:
        page = await session.list_tools(
            params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


class McpServers:
    """The MCP servers of one worker."""

    def __init__(self, servers: Mapping[str, McpServer], *, cwd: Path,
                 env: Mapping[str, str], wrap: Wrap | None = None) -> None:
        self.servers = dict(servers)
        self.cwd = cwd
        self.env = dict(env)
        self.wrap: Wrap = wrap or (lambda argv, cwd: list(argv))
        self._conns: dict[str, _Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def tools(self, name: str) -> list[Tool]:
        """Start server `name` (if needed) and wrap its tools."""
        listing = self._start(name)
        made: list[Tool] = []
        for spec in listing:
            made.append(self._wrap(name, spec))
        return made

    def call(self, name: str, tool: str, arguments: dict[str, Any]) -> ToolResult:
        server = self.servers[name]
        conn = self._conns.get(name)
        if conn is None or conn.broken or conn.session is None:
            try:
                self._start(name)
            except McpError as exc:
                return ToolResult(exc.message, is_error=True)
            conn = self._conns[name]
        coro = conn.session.call_tool(tool, arguments, read_timeout_seconds=server.timeout_s)
        try:
            result = self._run(coro, server.timeout_s + 5)
        except FutureTimeout:
            return ToolResult(f"MCP tool {name}{SEPARATOR}{tool} timed out after "
                              f"{server.timeout_s:g}s", is_error=True)
        except Exception as exc:  # the model's error result
            message = _describe(exc)
            if "closed" in message.lower() or not isinstance(exc, _mcp_error()):
                conn.broken = True  # the next call starts the server again
                self._run(conn.stop(), 15)
                return ToolResult(f"MCP server {name!r} stopped during the call "
                                  f"({message}); it is restarted on the next call",
                                  is_error=True)
            return ToolResult(f"MCP tool {name}{SEPARATOR}{tool} failed: {message}",
                              is_error=True)
        return _as_result(result)

    def close(self) -> None:
        """Stop every server and the loop thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        conns = list(self._conns.values())
        self._conns.clear()

        async def stop_all() -> None:
            await asyncio.gather(*(c.stop() for c in conns), return_exceptions=True)

        with contextlib.suppress(Exception):  # best effort; the process ends anyway
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()

    # internals
    def _start(self, name: str) -> list[Any]:
        if name not in self.servers:
            raise McpError(f"no MCP server named {name!r} in config.toml")
        old = self._conns.get(name)
        if old is not None and not old.broken and old.session is not None:
            raise McpError(f"MCP server {name!r} is already running")
        conn = _Connection(self.servers[name], self.cwd, self.env, self.wrap)
        self._conns[name] = conn
        try:
            return self._run(conn.start(), self.servers[name].startup_timeout_s + 5)
        except FutureTimeout:
            raise McpError(f"MCP server {name!r} did not start in time") from None

    def _run(self, coro: Any, timeout: float) -> Any:
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="mcp-loop",
                                          daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _wrap(self, server: str, spec: Any) -> Tool:
        original = str(spec.name)
        name = _UNSAFE.sub("_", f"{server}{SEPARATOR}{original}")[:64]
        schema = dict(spec.input_schema or {}) or dict(_LOOSE_SCHEMA)
        if schema.get("type") != "object" or check_schema(schema, "parameters"):
            schema = dict(_LOOSE_SCHEMA)  # a schema beyond our validator: the server checks
        description = (spec.description or f"Tool {original} of MCP server {server}").strip()

        def handler(arguments: dict[str, Any]) -> ToolResult:
            return self.call(server, original, arguments)

        if not TOOL_NAME.match(name):
            raise McpError(f"MCP server {server!r}: cannot name tool {original!r}")
        return Tool(name, description[:1000], schema, handler, toolset=f"mcp:{server}")


def _as_result(result: Any) -> ToolResult:
    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(block.resource, "text", None) is not None:
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'content'}: {getattr(block, 'mime_type', '') or ''}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return ToolResult("\n".join(parts) or "(no content)", is_error=bool(result.is_error))


def _mcp_error() -> type[Exception]:
    from mcp.shared.exceptions import MCPError

    return MCPError


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
