"""`kanban web`: bind, print the address with its token, serve until Ctrl-C."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn

from kanban.errors import BoardNotFound, UsageError
from kanban.service import Kanban
from kanban.state.paths import DbLocation
from kanban.web.app import build, create_app
from kanban.web.http import WebBoard
from kanban.web.security import Access, check_bind, is_loopback, new_token

SHUTDOWN_GRACE_S = 3


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8765
    board: str = "default"
    token: str | None = None  # None: a fresh random one; "": no token (loopback only)
    open_browser: bool = False
    per_column: int = 20


class _Server(uvicorn.Server):
    """uvicorn, but event streams end at once on Ctrl-C instead of holding shutdown up."""

    def __init__(self, config: uvicorn.Config, web: WebBoard) -> None:
        super().__init__(config)
        self.web = web
        self.loop: Any = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.web.hub.close_viewers)
        super().handle_exit(sig, frame)


def serve(kanban: Kanban, location: DbLocation, options: ServeOptions, *,
          say: Callable[[str], None], show_url: Callable[[str], None]) -> None:
    token = new_token() if options.token is None else options.token
    check_bind(options.host, token)
    if options.board not in {b["name"] for b in kanban.boards()}:
        raise BoardNotFound(options.board)
    sock = bind(options.host, options.port)
    port = sock.getsockname()[1]
    access = Access(token=token, port=port, loopback_only=is_loopback(options.host))
    web = build(kanban, location, access, board=options.board, per_column=options.per_column)
    config = uvicorn.Config(create_app(web), log_level="warning", access_log=False,
                            lifespan="on", server_header=False, proxy_headers=False,
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    server = _Server(config, web)
    url = address(options.host, port) + (f"?token={token}" if token else "")
    say(f"serving board {options.board!r} of {kanban.db.display} (Ctrl-C to stop)")
    if not token:
        say("warning: no token: any program on this machine can use the board")
    if not access.loopback_only:
        say(f"warning: listening on {options.host} over plain HTTP: the token crosses the "
            "network unencrypted; an SSH tunnel to 127.0.0.1 is safer (see the README)")
    show_url(url)
    if options.open_browser:
        threading.Thread(target=_open_when_up, args=(server, url), daemon=True).start()
    server.run(sockets=[sock])


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or one clear line saying why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"cannot listen on {host!r}: {exc.strerror}") from None
    family, kind, proto, _, where = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(where)
        sock.listen(2048)  # connections queue from now on, before uvicorn starts serving
    except OSError as exc:
        sock.close()
        reason = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise UsageError(f"cannot listen on {host}:{port}: {reason}") from None
    return sock


def address(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def _open_when_up(server: uvicorn.Server, url: str) -> None:
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        webbrowser.open(url)

