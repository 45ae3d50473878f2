"""Attacks on `network = ["allowed.test"]`: a card whose commands may reach one host tries
to reach another through the worker's proxy, around it, and with request lines built to
confuse it; its web_fetch tries the same. Both names are pinned to one local server by
`network_hosts`, which records every request that reaches it."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.security.conftest import Attack
from tests.support.procs import query

REACHED = "allowlist-server-reached"
REFUSED = "not in this card's network list (allowed.test)"
PROFILE = """
toolsets = ["kanban", "terminal", "web", "file"]
approval = "allow"
sandbox = "required"
network = ["allowed.test"]
network_hosts = { "allowed.test" = "127.0.0.1", "denied.test" = "127.0.0.1" }
"""
# Raw request lines sent to the proxy from inside the sandbox (its address is in
# HTTP_PROXY); each asks for its own path so the server's log shows what got through.
PROBE = r'''
import os, socket, sys
port = sys.argv[1]
proxy = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
probes = {
    "huge": "CONNECT allowed.test:P HTTP/1.1\r\nX: " + "a" * 100000
            + "\r\n\r\nGET /huge HTTP/1.0\r\n\r\n",
    "literal": "CONNECT 127.0.0.1:P HTTP/1.1\r\n\r\nGET /literal HTTP/1.0\r\n\r\n",
    "suffix": "CONNECT allowed.test.evil.test:P HTTP/1.1\r\n\r\nGET /suffix HTTP/1.0\r\n\r\n",
    "fragment": "CONNECT evil.test#allowed.test:P HTTP/1.1\r\n\r\nGET /fragment HTTP/1.0\r\n\r\n",
    "userinfo": "CONNECT allowed.test@denied.test:P HTTP/1.1\r\n\r\nGET /userinfo HTTP/1.0\r\n\r\n",
    "url-userinfo": "GET http://allowed.test@denied.test:P/url-userinfo HTTP/1.1\r\n\r\n",
    "url-port": "GET http://allowed.test:P@denied.test/url-port HTTP/1.1\r\n\r\n",
    "url-fragment": "GET http://denied.test#@allowed.test:P/url-fragment HTTP/1.1\r\n\r\n",
    "control": "CONNECT allowed.test:P HTTP/1.1\r\n\r\nGET /control HTTP/1.0\r\n\r\n",
}
for name, text in probes.items():
    conn = socket.create_connection(("127.0.0.1", proxy), timeout=10)
    answer = b""
    try:
        conn.sendall(text.replace(":P", ":" + port).encode())
        conn.shutdown(socket.SHUT_WR)
        while chunk := conn.recv(65536):
            answer += chunk
    except OSError as exc:
        answer += ("<%s>" % exc).encode()
    print(name, "=>", answer.decode("latin-1").split("\r\n")[0], "|", answer[-60:])
'''


class Recorder:
    """One HTTP server on 127.0.0.1 that answers REACHED and records each request's path."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        paths = self.paths

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                paths.append(self.path)
                if self.path.startswith("/redirect?to="):  # a listed host sends us on
                    self.send_response(302)
                    self.send_header("Location", self.path.split("=", 1)[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = REACHED.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def server() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.httpd.shutdown()
    recorder.httpd.server_close()


def test_commands_reach_the_listed_host_through_the_proxy_and_nothing_else(
        attack: Attack, sandboxed: None, server: Recorder) -> None:
    attack.configure(PROFILE)
    port = server.port
    card, seen = attack.run([
        ("terminal", {"command": f"curl -sS --max-time 5 http://allowed.test:{port}/curl"}),
        ("terminal", {"command": f"curl -sS --max-time 5 http://denied.test:{port}/denied"}),
        ("terminal", {"command": "python3 -c 'import urllib.request as u; print(u.urlopen("
                                 f"\"http://allowed.test:{port}/urllib\", timeout=5).read())'"}),
        ("terminal", {"command": f"curl -sS --noproxy '*' --max-time 3 "
                                 f"http://127.0.0.1:{port}/direct; echo rc=$?"}),
        ("terminal", {"command": "python3 -c 'import socket; socket.create_connection(("
                                 f"\"127.0.0.1\", {port}), timeout=3)'; echo rc=$?"}),
        ("terminal", {"command": f"curl -sS --max-time 5 https://denied.test:{port}/; "
                                 "echo rc=$?"}),
    ])
    assert attack.card(card)[0] == "done", attack.card(card)
    curl, denied, urllib, direct, raw, https = seen
    assert REACHED in curl and "exit code 0" in curl, curl
    assert REFUSED in denied and REACHED not in denied, denied
    assert REACHED in urllib, urllib
    assert REACHED not in direct and "rc=7" in direct, direct  # no route around the proxy
    assert "rc=1" in raw and ("refused" in raw or "unreachable" in raw), raw
    assert "CONNECT tunnel failed, response 403" in https and "rc=56" in https, https
    assert sorted(server.paths) == ["/curl", "/urllib"]
    notes = [json.loads(data)["note"] for (data,) in query(
        attack.board.path, "SELECT data FROM event WHERE card_id = ? AND kind = 'sandbox'",
        card)]
    assert notes == ["sandbox: bwrap, network only to allowed.test through the worker's "
                     "proxy"]
    attack.assert_contained()


def test_web_fetch_obeys_the_same_list(attack: Attack, sandboxed: None,
                                       server: Recorder) -> None:
    attack.configure(PROFILE)
    card, seen = attack.run([
        ("web_fetch", {"url": f"http://allowed.test:{server.port}/fetched"}),
        ("web_fetch", {"url": f"http://denied.test:{server.port}/fetched-denied"}),
        ("web_fetch", {"url": f"http://127.0.0.1:{server.port}/fetched-literal"}),
        ("web_fetch", {"url": f"http://allowed.test@denied.test:{server.port}/x"}),
    ])
    assert attack.card(card)[0] == "done", attack.card(card)
    allowed, denied, literal, userinfo = seen
    assert REACHED in allowed, allowed
    assert REFUSED in denied and "'denied.test'" in denied, denied
    assert REFUSED in literal and "'127.0.0.1'" in literal, literal
    assert REACHED not in userinfo, userinfo
    assert server.paths == ["/fetched"]


def test_a_listed_host_that_redirects_elsewhere_does_not_open_the_way(
        attack: Attack, sandboxed: None, server: Recorder) -> None:
    """The allowed server answers 302 to a host off the list: web_fetch checks every hop
    against the list, and curl -L asks the proxy again, which refuses."""
    attack.configure(PROFILE)
    port = server.port
    bounce = f"http://allowed.test:{port}/redirect?to=http://denied.test:{port}"
    card, (fetched, followed, literal) = attack.run([
        ("web_fetch", {"url": f"{bounce}/fetch-hop"}),
        ("terminal", {"command": f"curl -sS -L --max-time 5 '{bounce}/curl-hop'; echo rc=$?"}),
        ("web_fetch", {"url": f"http://allowed.test:{port}/redirect?to="
                              f"http://127.0.0.1:{port}/literal-hop"}),
    ])
    assert attack.card(card)[0] == "done", attack.card(card)
    assert REFUSED in fetched and "'denied.test'" in fetched, fetched
    assert REFUSED in followed and REACHED not in followed, followed
    assert REFUSED in literal and REACHED not in literal, literal
    # each first hop reached the listed host, no second hop reached anything
    assert [p.rsplit("/", 1)[1] for p in server.paths] == ["fetch-hop", "curl-hop",
                                                           "literal-hop"], server.paths
    assert all(p.startswith("/redirect?to=") for p in server.paths), server.paths
    attack.assert_contained()


def test_hostile_request_lines_reach_nothing_but_the_listed_host(
        attack: Attack, sandboxed: None, server: Recorder) -> None:
    attack.configure(PROFILE)
    card, seen = attack.run([
        ("write_file", {"path": "probe.py", "content": PROBE}),
        ("terminal", {"command": f"python3 probe.py {server.port}"}),
        ("terminal", {"command": "for f in /tmp/kanban-net-*/proxy.sock; do echo found $f; "
                                 "rm -f $f; echo rm=$?; touch $(dirname $f)/planted; "
                                 "echo touch=$?; done"}),
        ("terminal", {"command": f"curl -sS --max-time 5 http://allowed.test:{server.port}"
                                 "/after"}),
    ])
    assert attack.card(card)[0] == "done", attack.card(card)
    answers = dict(line.split(" => ", 1) for line in seen[1].splitlines() if " => " in line)
    assert set(answers) == {"huge", "literal", "suffix", "fragment", "userinfo",
                            "url-userinfo", "url-port", "url-fragment", "control"}, seen[1]
    assert answers.pop("control").startswith("HTTP/1.1 200 Connection established")
    for name in ("literal", "suffix", "fragment", "userinfo", "url-userinfo", "url-fragment"):
        assert answers[name].startswith("HTTP/1.1 403 host "), (name, answers[name])
    assert answers["url-port"].startswith("HTTP/1.1 400 bad port"), answers["url-port"]
    assert "431" in answers["huge"] or "<" in answers["huge"], answers["huge"]
    swap = seen[2]
    assert "found /tmp/kanban-net-" in swap and "rm=1" in swap and "touch=1" in swap, swap
    assert REACHED in seen[3], seen[3]  # the proxy's socket is still the proxy's
    assert server.paths == ["/control", "/after"]


def test_a_stdio_mcp_server_starts_under_the_bridge(attack: Attack, sandboxed: None) -> None:
    server = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
    attack.configure(PROFILE.replace('"file"]', '"file", "mcp:test"]'),
                     f'[mcp.test]\ncommand = "{sys.executable}"\nargs = ["{server}"]\n')
    card, seen = attack.run([("test__echo", {"text": "through the bridge"})])
    assert attack.card(card)[0] == "done", attack.card(card)
    assert seen == ["echo: through the bridge"], seen
