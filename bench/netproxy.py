"""Rows 9.3-9.4: a loopback HTTP GET through a card's network-list proxy against the same
GET made directly, in one run (issue 28: the proxy adds at most 5 ms).

The proxied path is the one a sandboxed command takes: a TCP connection to the bridge
(`kanban.tools.netbridge`, a real process), the bridge's Unix socket to the worker's proxy,
the allowlist check, then TCP to the server. Each GET opens a fresh connection on both
paths (the proxy closes after each request), interleaved against drift.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import Sizes, percentile
from bench.report import Goal, Row
from kanban.state.config import WebSettings
from kanban.state.network import HostList
from kanban.tools.netbridge import bridge_argv
from kanban.tools.netproxy import NetProxy

REQUESTS = {"full": 600, "quick": 200, "smoke": 10}
BODY = b"x" * 512


class _Quiet(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def _get(port: int, target: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", target, headers={"Host": "allowed.test"})
        reply = conn.getresponse()
        assert reply.status == 200 and reply.read() == BODY, reply.status
    finally:
        conn.close()


def _timed(action: Callable[[], None], count: int, into: list[float]) -> None:
    for _ in range(count):
        start = time.perf_counter()
        action()
        into.append((time.perf_counter() - start) * 1000)


def run(sizes: Sizes, work: Path) -> list[Row]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    proxy = NetProxy(HostList(("allowed.test",), {"allowed.test": "127.0.0.1"}),
                     WebSettings())
    proxy.start()
    bridge = subprocess.Popen(
        bridge_argv(proxy.socket_path, ["sh", "-c", 'echo "$HTTP_PROXY"; exec sleep 3600']),
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, process_group=0)
    try:
        assert bridge.stdout is not None
        bridge_port = int(bridge.stdout.readline().strip().rsplit(":", 1)[1])
        direct: list[float] = []
        proxied: list[float] = []
        url = f"http://allowed.test:{port}/"
        _get(port, "/"), _get(bridge_port, url)  # warm both paths
        count = REQUESTS.get(sizes.name, 200)
        for _ in range(5):  # interleaved, against drift
            _timed(lambda: _get(port, "/"), count // 5 or 1, direct)
            _timed(lambda: _get(bridge_port, url), count // 5 or 1, proxied)
    finally:
        os.killpg(bridge.pid, signal.SIGKILL)
        bridge.wait()
        if bridge.stdout is not None:
            bridge.stdout.close()
        proxy.stop()
        server.shutdown()
        server.server_close()
    rows = []
    for key, p in (("9.3", 50), ("9.4", 99)):
        got, base = percentile(proxied, p), percentile(direct, p)
        rows.append(Row(key, f"loopback GET through the network-list proxy (p{p})", "ms",
                        got, base, f"direct GET, p{p}", Goal("added", "<=", 5, "ms"),
                        f"{len(proxied)} GETs each way, a new connection each: bridge "
                        f"(TCP) -> Unix socket -> proxy -> server; adds {got - base:.2f} ms"))
    return rows
