"""The worker's HTTP proxy for a card whose network is a list of hosts.

It listens on a Unix socket in a folder of its own, which the sandbox binds in (the sandbox
has no network of its own; `kanban.tools.netbridge` gives its commands a TCP address that
leads here). It speaks CONNECT (HTTPS and any TCP) and absolute-URI requests (plain HTTP).
The requested host is checked against the list as text, before any DNS lookup or connect;
a refusal is a 403 whose status line and body say which host and why. A name resolved by
DNS must not lead to an address `[web]` refuses (loopback, private, link-local), so a
listed domain cannot be pointed at the worker's own machine; `network_hosts` pins and
listed addresses are the profile's own word and pass. Heads are bounded, and so are waits.
"""

from __future__ import annotations

import contextlib
import re
import select
import shutil
import socket
import tempfile
import threading
from pathlib import Path

from kanban.state.config import WebSettings
from kanban.state.network import HostList
from kanban.tools.fetch import refusal as address_refusal

MAX_HEAD_BYTES = 16_384  # a request line and its headers
MAX_CONNECTIONS = 64
HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 300.0  # a tunnel with no bytes either way for this long is closed
_CHUNK = 65_536
_PORT = re.compile(r"[0-9]{1,5}")
_HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


class Refused(Exception):
    """A request the proxy does not forward: its status and one line for the model."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class NetProxy:
    """One card's proxy; `start()` is idempotent (the first command starts it), `stop()`
    closes it and removes its folder."""

    def __init__(self, hosts: HostList, web: WebSettings) -> None:
        self.hosts, self.web = hosts, web
        self.folder = Path(tempfile.mkdtemp(prefix="kanban-net-"))
        self.socket_path = self.folder / "proxy.sock"
        self._server: socket.socket | None = None
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(self.socket_path))
            server.listen(MAX_CONNECTIONS)
            self._server = server
        threading.Thread(target=self._accept, args=(server,), name="netproxy",
                         daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # stopped
            if not self._slots.acquire(blocking=False):
                _answer(conn, Refused(503, "the proxy has too many open connections"))
                conn.close()
                continue  # (the answer is short: it fits the socket's buffer)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._handle(conn)
        except OSError:
            pass  # either side went away
        finally:
            conn.close()
            self._slots.release()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(HEAD_TIMEOUT_S)
        try:
            head, rest = _read_head(conn)
            method, host, port, upstream_head = _parse(head)
            upstream = self._connect(host, port)
        except Refused as refused:
            _answer(conn, refused)
            return
        with upstream:
            conn.settimeout(IDLE_TIMEOUT_S)
            if method == "CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(upstream_head)
            if rest:
                upstream.sendall(rest)
            splice(conn, upstream)

    def _connect(self, host: str, port: int) -> socket.socket:
        """A connection to an allowed `host`; Refused when it is not on the list or leads
        to a refused address."""
        why = self.hosts.refusal(host)
        if why is not None:
            raise Refused(403, why)
        last = OSError("no address")
        for address in self._addresses(host, port):
            try:
                upstream = socket.create_connection((address, port), CONNECT_TIMEOUT_S)
                upstream.settimeout(IDLE_TIMEOUT_S)
                return upstream
            except OSError as exc:
                last = exc
        raise Refused(502, f"cannot connect to {host}:{port} ({last.strerror or last})")

    def _addresses(self, host: str, port: int) -> list[str]:
        pinned = self.hosts.pinned(host)
        if pinned is not None:  # the profile's own word
            return [pinned]
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise Refused(502, f"cannot resolve {host} ({exc.strerror})") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            why = address_refusal(address, self.web)
            if why is not None:
                raise Refused(403, f"{host} resolves to {address}, {why}; refused")
        return addresses


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    """The request head (to the blank line) and whatever followed it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise Refused(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
        chunk = conn.recv(_CHUNK)
        if not chunk:
            raise Refused(400, "the request ended before its head did")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD_BYTES:
        raise Refused(431, f"request head larger than {MAX_HEAD_BYTES} bytes")
    return head, rest


def _parse(head: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, the head to send upstream for plain HTTP)."""
    line, *headers = head.split(b"\r\n")
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Refused(400, "not an HTTP/1.x request line")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _authority(target, default=None)
        return method, host, port, b""
    if not target.lower().startswith("http://"):
        raise Refused(400, "a proxy request needs an absolute http:// URL (https goes "
                           "through CONNECT)")
    rest = target[len("http://"):]
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    host, port = _authority(rest[:cut], default=80)
    path = rest[cut:].split("#", 1)[0] or "/"
    path = path if path.startswith("/") else "/" + path
    kept = [h for h in headers if h.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
    upstream = b"\r\n".join([f"{method} {path} {version}".encode("latin-1"), *kept,
                             b"Connection: close"]) + b"\r\n\r\n"
    return method, host, port, upstream


def _authority(text: str, default: int | None) -> tuple[str, int]:
    """`host[:port]` (IPv6 in brackets); the host is checked by the list, not here."""
    host, port_text = text, ""
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        port_text = tail.removeprefix(":")
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    if not port_text and default is not None:
        return host, default
    if not _PORT.fullmatch(port_text) or not 0 < int(port_text) < 65536:
        raise Refused(400, f"bad port in {text[:100]!r}")
    return host, int(port_text)


def _answer(conn: socket.socket, refused: Refused) -> None:
    reason = refused.message.replace("\r", " ").replace("\n", " ")
    body = f"kanban proxy: {reason}\n".encode("utf-8", "replace")
    head = (f"HTTP/1.1 {refused.status} {reason}\r\nContent-Type: text/plain; charset=utf-8"
            f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with contextlib.suppress(OSError):
        conn.sendall(head.encode("latin-1", "replace") + body)


def splice(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until both sides have finished or nothing moves for a while."""
    open_ends = {a.fileno(): (a, b), b.fileno(): (b, a)}
    poller = select.poll()  # not select(): a worker may hold descriptors past 1024
    for fd in open_ends:
        poller.register(fd, select.POLLIN)
    while open_ends:
        ready = poller.poll(IDLE_TIMEOUT_S * 1000)
        if not ready:
            return
        for fd, _ in ready:
            source, target = open_ends[fd]
            data = source.recv(_CHUNK)
            if data:
                target.sendall(data)
                continue
            poller.unregister(fd)
            del open_ends[fd]
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)
