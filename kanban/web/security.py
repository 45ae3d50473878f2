"""Who may use the web board: a token exchanged for a cookie, CSRF tokens, same-origin writes.

Jupyter's habit: a random token printed in the URL at start; the first request that
carries it gets an HttpOnly, SameSite=Strict session cookie and is redirected to the
same URL without the token. Every other request without the cookie (or an
`Authorization: Bearer <token>` header, for scripts) is answered 401. Requests that
change state must also carry the CSRF token and must not come from another origin.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from kanban.state.errors import UsageError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_ENV = "KANBAN_WEB_TOKEN"
MIN_REMOTE_TOKEN = 16  # characters; a token guarding a non-loopback bind must be no shorter
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    # not "no-referrer": with it, browsers send `Origin: null` on this board's own forms
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def new_token() -> str:
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str) -> None:
    """Refuse to serve beyond this machine without a (long enough) token."""
    if is_loopback(host):
        return
    if not token:
        raise UsageError(f"refusing to serve on {host} without a token: anyone who can reach "
                         "it could run commands through the board (bind 127.0.0.1 and use an "
                         "SSH tunnel, or set a token)")
    if len(token) < MIN_REMOTE_TOKEN:
        raise UsageError(f"refusing to serve on {host} with a token shorter than "
                         f"{MIN_REMOTE_TOKEN} characters")


def _derive(secret: str, purpose: str) -> str:
    return hmac.new(secret.encode(), f"kanban-web {purpose}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Access:
    """The secrets of one server: the token, and the cookie and CSRF values made from it."""

    token: str  # "" turns authentication off (allowed on loopback only)
    port: int
    loopback_only: bool = True  # Host headers must name this machine (DNS rebinding)
    server_secret: str = field(default_factory=new_token)

    @property
    def cookie_name(self) -> str:
        return f"kanban_session_{self.port}"  # cookies ignore ports: one per server

    @property
    def session(self) -> str:
        return _derive(self.token or self.server_secret, "session")

    @property
    def csrf(self) -> str:
        return _derive(self.token or self.server_secret, "csrf")

    def token_ok(self, given: str) -> bool:
        return bool(self.token) and hmac.compare_digest(given.encode(), self.token.encode())

    def session_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.session.encode())

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())

    def cookie_header(self) -> bytes:
        return (f"{self.cookie_name}={self.session}; Path=/; HttpOnly; SameSite=Strict"
                ).encode()


class Guard:
    """ASGI middleware in front of every route: Host, authentication, origin, headers."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = _headers(scope)
        send = _with_headers(send, started)
        host = headers.get("host", "")
        if self.access.loopback_only and not is_loopback(_hostname(host)):
            await _plain(send, 421, "this board answers only to localhost names; use an SSH "
                         "tunnel or bind another address")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query and self.access.token_ok(query["token"]):
            await _redirect_with_cookie(send, scope, query, self.access)
            return
        how = self._authenticated(headers)
        if how is None:
            await _unauthorised(send)
            return
        scope.setdefault("state", {})["auth"] = how
        if scope["method"] not in SAFE_METHODS and not same_origin(headers):
            await _plain(send, 403, "cross-origin request refused")
            return
        await self.app(scope, receive, send)

    def _authenticated(self, headers: dict[str, str]) -> str | None:
        """"cookie", "bearer" or None; every request is authenticated when the token is off."""
        if not self.access.token:
            return "cookie"
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() in ("bearer", "token") and self.access.token_ok(value.strip()):
            return "bearer"
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no session
            return None
        morsel = cookie.get(self.access.cookie_name)
        if morsel is not None and self.access.session_ok(morsel.value):
            return "cookie"
        return None


def same_origin(headers: dict[str, str]) -> bool:
    """A state-changing request must come from this board's own pages (or a non-browser)."""
    origin = headers.get("origin")
    if origin is not None:
        parts = urlsplit(origin)
        return origin != "null" and parts.scheme in ("http", "https") and \
            parts.netloc.lower() == headers.get("host", "").lower()
    site = headers.get("sec-fetch-site")
    return site is None or site in ("same-origin", "none")


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _hostname(host: str) -> str:
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _with_headers(send: Send, started: float) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            elapsed_ms = (time.perf_counter() - started) * 1000
            message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS,
                                  (b"server-timing", f"app;dur={elapsed_ms:.2f}".encode())]
        await send(message)

    return wrapped


async def _plain(send: Send, status: int, text: str,
                 headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


_UNAUTHORISED = """<!doctype html><html lang="en"><meta charset="utf-8">
<title>kanban: token needed</title>
<body><h1>401: this board needs its token</h1>
<p>Open the address <code>kanban web</code> printed when it started (it ends in
<code>?token=…</code>). The token is exchanged for a cookie on first use.</p>
<p>Scripts may send <code>Authorization: Bearer &lt;token&gt;</code>.</p></body></html>
"""


async def _unauthorised(send: Send) -> None:
    body = _UNAUTHORISED.encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"text/html; charset=utf-8"), (b"cache-control", b"no-store"),
        (b"www-authenticate", b'Bearer realm="kanban"'),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _redirect_with_cookie(send: Send, scope: Scope, query: dict[str, str],
                                access: Access) -> None:
    """Trade the token for the session cookie; the address loses the token (history,
    screenshots, Referer)."""
    rest = urlencode({k: v for k, v in query.items() if k != "token"})
    path = "/" + (scope.get("path") or "/").lstrip("/")  # never `//host`: no open redirect
    location = path + (f"?{rest}" if rest else "")
    await _plain(send, 303, "signed in", ((b"location", location.encode()),
                                          (b"set-cookie", access.cookie_header())))
