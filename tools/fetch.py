"""HTTP(S) GETs for agents, guarded against server-side request forgery.

Every hop (the first URL and each redirect) is resolved and each address checked before
connecting; the connection then goes to the checked address (no second DNS lookup that a
rebinding attack could answer differently). Loopback and private networks are refused
unless `[web]` allows them; link-local (cloud metadata), multicast and reserved never pass.
Size, time and redirect caps hold throughout.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from kanban.state.config import WebSettings
from kanban.state.errors import KanbanError
from kanban.state.network import HostList

USER_AGENT = "kanban-workbench/0.1 (+agent web_fetch)"
REDIRECTS = (301, 302, 303, 307, 308)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_CHUNK = 65_536


class FetchError(KanbanError):
    """The page could not be fetched (refused address, bad URL, timeout, network error)."""


@dataclass(frozen=True)
class Response:
    url: str  # after redirects
    status: int
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool


def refusal(address: str, web: WebSettings) -> str | None:
    """Why `address` may not be reached under `web`, or None."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return None if web.allow_loopback else "a loopback address"
    if ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return "a link-local, multicast or reserved address"
    if ip.is_private or ip in _CGNAT:
        return None if web.allow_private else "a private-network address"
    if not ip.is_global:
        return "not a public address"
    return None


def get(url: str, web: WebSettings, *, headers: Mapping[str, str] | None = None,
        body: bytes | None = None, trusted: bool = False,
        hosts: HostList | None = None) -> Response:
    """Fetch `url` following redirects; `trusted` (a configured search endpoint) skips the
    address checks of the first hop only. With `hosts` (a card's network list) every hop's
    host must be on it, and its pinned address is used instead of DNS."""
    deadline = time.monotonic() + web.timeout_s
    method = "POST" if body is not None else "GET"
    for hop in range(web.max_redirects + 1):
        response, location = _one(url, method, web, headers or {}, body, deadline,
                                  trusted=trusted and hop == 0, hosts=hosts)
        if location is None:
            return response
        url = urljoin(url, location)
        if response.status == 303 or (response.status in (301, 302) and method == "POST"):
            method, body = "GET", None
    raise FetchError(f"more than {web.max_redirects} redirects; stopped at {url}")


def _one(url: str, method: str, web: WebSettings, headers: Mapping[str, str],
         body: bytes | None, deadline: float, *, trusted: bool,
         hosts: HostList | None) -> tuple[Response, str | None]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"{url}: only http and https URLs can be fetched")
    if parts.username or parts.password:
        raise FetchError(f"{url}: URLs with credentials are refused")
    why = hosts.refusal(parts.hostname) if hosts is not None else None
    if why is not None:
        raise FetchError(why)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise FetchError(f"{url}: bad port") from None
    pinned = hosts.pinned(parts.hostname) if hosts is not None else None
    address = pinned or _address(parts.hostname, port, web, trusted=trusted)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn = _connection(parts.scheme, parts.hostname, port, address, _left(deadline))
    try:
        conn.request(method, path, body=body, headers={
            "User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate, identity",
            "Accept": "text/html,text/plain,application/json;q=0.9,*/*;q=0.5", **headers})
        reply = conn.getresponse()
        location = reply.getheader("Location") if reply.status in REDIRECTS else None
        if location is not None:
            return Response(url, reply.status, "", None, b"", False), location
        data, truncated = _read(reply, web.max_bytes, deadline)
        content_type = (reply.getheader("Content-Type") or "").split(";")[0].strip().lower()
        charset = reply.headers.get_content_charset()
        return Response(url, reply.status, content_type, charset, data, truncated), None
    except (OSError, http.client.HTTPException) as exc:
        raise FetchError(f"{url}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def _address(host: str, port: int, web: WebSettings, *, trusted: bool) -> str:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchError(f"{host}: cannot resolve ({exc.strerror})") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not trusted:
        for address in addresses:
            why = refusal(address, web)
            if why is not None:
                raise FetchError(f"{host} resolves to {address}, {why}; refused (a [web] "
                                 "setting in config.toml can allow loopback or private hosts)")
    return addresses[0]


def _connection(scheme: str, host: str, port: int, address: str,
                timeout: float) -> http.client.HTTPConnection:
    if scheme == "https":
        return _PinnedHTTPS(host, port, address, timeout)
    return _PinnedHTTP(host, port, address, timeout)


class _PinnedHTTP(http.client.HTTPConnection):
    """Connects to the address that was checked, not to a fresh lookup of `host`."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def _read(reply: http.client.HTTPResponse, cap: int, deadline: float) -> tuple[bytes, bool]:
    encoding = (reply.getheader("Content-Encoding") or "identity").lower()
    inflate = zlib.decompressobj(47) if encoding in ("gzip", "deflate", "x-gzip") else None
    out = bytearray()
    while len(out) <= cap:
        if time.monotonic() > deadline:
            raise FetchError("the page took too long to arrive")
        chunk = reply.read(_CHUNK)
        if not chunk:
            break
        out += inflate.decompress(chunk, cap + 1 - len(out)) if inflate else chunk
    return bytes(out[:cap]), len(out) > cap


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError("the web request ran out of time")
    return left
