"""`kanban mcp --http`: the board's MCP server over streamable HTTP, behind the web
board's token.

The SDK's streamable HTTP app (at /mcp) sits behind `kanban.web.security.Guard`, the
same gate `kanban web` uses: a request without `Authorization: Bearer <token>` (or the
web board's session cookie) is answered 401, a Host header that does not name this
machine 421 on a loopback bind (DNS rebinding), and a cross-origin write 403. Unlike the
web board, an empty token is refused: a local client without one uses stdio.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import uvicorn

from kanban.errors import UsageError
from kanban.mcp_server.board import McpBoard
from kanban.mcp_server.server import build_server
from kanban.web.security import Access, ASGIApp, Guard, check_bind, is_loopback, new_token
from kanban.web.server import address, bind

PATH = "/mcp"
MAX_BODY = 1024 * 1024  # bytes of one request: every tool's arguments fit well within
SHUTDOWN_GRACE_S = 3


@dataclass(frozen=True)
class HttpOptions:
    host: str = "127.0.0.1"
    port: int = 8766
    token: str | None = None  # None: a fresh random one


def http_app(board: McpBoard, access: Access, host: str) -> ASGIApp:
    """The guarded ASGI app: /mcp for MCP clients, 401 without the token."""
    inner = build_server(board).streamable_http_app(
        streamable_http_path=PATH, host=host, max_request_body_size=MAX_BODY)
    return Guard(inner, access)


def serve_http(board: McpBoard, options: HttpOptions, *, say: Callable[[str], None],
               show: Callable[[str], None]) -> None:
    """Bind, show the address and the header a client sends, serve until Ctrl-C."""
    token = new_token() if options.token is None else options.token
    if not token:
        raise UsageError("kanban mcp --http needs a token (an empty one is refused); a "
                         "client on this machine without one can use stdio: `kanban mcp`")
    check_bind(options.host, token)
    sock = bind(options.host, options.port)
    access = Access(token=token, port=sock.getsockname()[1],
                    loopback_only=is_loopback(options.host))
    config = uvicorn.Config(http_app(board, access, options.host), log_level="warning",
                            access_log=False, lifespan="on", server_header=False,
                            proxy_headers=False, timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    say(f"serving board {board.board!r} of {board.kanban.db.display} to MCP clients "
        "(Ctrl-C to stop)")
    if not access.loopback_only:
        say(f"warning: listening on {options.host} over plain HTTP: the token crosses the "
            "network unencrypted; an SSH tunnel to 127.0.0.1 is safer")
    show(address(options.host, access.port).rstrip("/") + PATH)
    show(f"Authorization: Bearer {token}")
    uvicorn.Server(config).run(sockets=[sock])
