"""web_fetch and web_search against local HTTP servers: text, caps, and the SSRF guard."""

from __future__ import annotations

import dataclasses
import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kanban.state.config import WebSettings
from kanban.tools.fetch import refusal
from kanban.tools.workbench import Workbench
from tests.unit.work.conftest import ok, refused

PAGE = b"""<html><head><title>Write-ahead log</title><script>steal()</script></head>
<body><nav>menu</nav><h1>WAL</h1><p>SQLite's <b>write-ahead log</b> keeps
<a href="/more">readers</a> and writers apart.</p><ul><li>fast</li><li>safe</li></ul></body>
</html>"""


class Site:
    """A tiny web site on 127.0.0.1; `routes` maps a path to (status, headers, body)."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                site.requests.append((self.command, self.path, dict(self.headers), body))
                status, headers, data = site.routes.get(self.path.split("?")[0],
                                                        (404, {}, b"missing"))
                self.send_response(status)
                for name, value in {"Content-Length": str(len(data)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.close()


@pytest.fixture
def web_bench(bench: Workbench) -> Workbench:
    return dataclasses.replace(bench, web=WebSettings(allow_loopback=True, max_bytes=50_000,
                                                      timeout_s=5, max_redirects=3))


def test_a_page_becomes_readable_text(web_bench: Workbench, site: Site) -> None:
    site.routes["/wal"] = (200, {"Content-Type": "text/html; charset=utf-8"}, PAGE)
    shown = ok(web_bench, "web_fetch", url=f"{site.url}/wal")
    assert shown.splitlines()[:2] == [f"URL: {site.url}/wal", "Title: Write-ahead log"]
    assert "# WAL" in shown and f"readers ({site.url}/more)" in shown
    assert "- fast\n- safe" in shown
    assert "steal()" not in shown and "menu" not in shown


def test_compressed_pages_and_plain_text(web_bench: Workbench, site: Site) -> None:
    site.routes["/gz"] = (200, {"Content-Type": "text/html", "Content-Encoding": "gzip"},
                          gzip.compress(PAGE))
    site.routes["/txt"] = (200, {"Content-Type": "text/plain; charset=latin-1"},
                           "café".encode("latin-1"))
    assert "# WAL" in ok(web_bench, "web_fetch", url=f"{site.url}/gz")
    assert ok(web_bench, "web_fetch", url=f"{site.url}/txt").endswith("café")


def test_redirects_are_followed_and_capped(web_bench: Workbench, site: Site) -> None:
    site.routes["/old"] = (301, {"Location": "/wal"}, b"")
    site.routes["/wal"] = (200, {"Content-Type": "text/html"}, PAGE)
    assert f"URL: {site.url}/wal" in ok(web_bench, "web_fetch", url=f"{site.url}/old")
    site.routes["/loop"] = (302, {"Location": "/loop"}, b"")
    assert "more than 3 redirects" in refused(web_bench, "web_fetch", url=f"{site.url}/loop")


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/",
                                    "http://10.0.0.1/admin", "http://[::ffff:10.1.2.3]/",
                                    "http://0.0.0.0:8080/", "http://192.168.1.1/"])
def test_every_redirect_is_checked_before_connecting(web_bench: Workbench, site: Site,
                                                     target: str) -> None:
    site.routes["/jump"] = (302, {"Location": target}, b"")
    message = refused(web_bench, "web_fetch", url=f"{site.url}/jump")
    assert "refused" in message
    assert [r[1] for r in site.requests] == ["/jump"]  # nothing else was asked of anyone


def test_loopback_is_refused_unless_config_allows_it(bench: Workbench, site: Site) -> None:
    site.routes["/wal"] = (200, {"Content-Type": "text/html"}, PAGE)
    assert "a loopback address; refused" in refused(bench, "web_fetch", url=f"{site.url}/wal")
    assert "loopback" in refused(bench, "web_fetch", url="http://localhost:9/")
    assert site.requests == []


def test_address_classes() -> None:
    default, open_lan = WebSettings(), WebSettings(allow_loopback=True, allow_private=True)
    assert refusal("93.184.216.34", default) is None
    assert refusal("127.0.0.1", default) == "a loopback address"
    assert refusal("::1", open_lan) is None
    assert refusal("10.2.3.4", default) == "a private-network address"
    assert refusal("100.64.0.1", open_lan) is None
    for never in ("169.254.169.254", "fe80::1", "224.0.0.1", "0.0.0.0", "240.0.0.1"):
        assert refusal(never, open_lan) is not None


def test_size_cap_non_text_and_errors(web_bench: Workbench, site: Site) -> None:
    site.routes["/huge"] = (200, {"Content-Type": "text/plain"}, b"z" * 200_000)
    assert "larger than 50,000 bytes" in ok(web_bench, "web_fetch", url=f"{site.url}/huge")
    site.routes["/img"] = (200, {"Content-Type": "image/png"}, b"\x89PNG")
    assert "is image/png, not a text page" in refused(web_bench, "web_fetch",
                                                      url=f"{site.url}/img")
    assert "HTTP 404" in refused(web_bench, "web_fetch", url=f"{site.url}/nope")
    assert "only http and https" in refused(web_bench, "web_fetch", url="file:///etc/passwd")
    no_net = dataclasses.replace(web_bench, profile=dataclasses.replace(web_bench.profile,
                                                                         network=False))
    assert "no network" in refused(no_net, "web_fetch", url=f"{site.url}/huge")


def test_search_needs_configuration(bench: Workbench) -> None:
    assert "web_search is not set up" in refused(bench, "web_search", query="sqlite wal")


def test_searxng_search(bench: Workbench, site: Site) -> None:
    site.routes["/search"] = (200, {"Content-Type": "application/json"}, json.dumps({
        "results": [{"title": "WAL mode", "url": "https://sqlite.org/wal.html",
                     "content": "Write-ahead logging"}]}).encode())
    searx = dataclasses.replace(bench, web=WebSettings(search="searxng", search_url=site.url))
    shown = ok(searx, "web_search", query="sqlite wal")
    assert shown == "1. WAL mode\n   https://sqlite.org/wal.html\n   Write-ahead logging"
    assert site.requests[0][1] == "/search?q=sqlite+wal&format=json"


@pytest.mark.parametrize("provider", ["brave", "tavily"])
def test_keyed_search_apis(bench: Workbench, site: Site, provider: str) -> None:
    answer = ({"web": {"results": [{"title": "T", "url": "https://u", "description": "d"}]}}
              if provider == "brave" else
              {"results": [{"title": "T", "url": "https://u", "content": "d"}]})
    site.routes["/api"] = (200, {"Content-Type": "application/json"}, json.dumps(answer).encode())
    web = WebSettings(search=provider, search_url=f"{site.url}/api",
                      search_key_env="SEARCH_API_KEY")
    assert "needs an API key" in refused(dataclasses.replace(bench, web=web), "web_search",
                                         query="q")
    keyed = dataclasses.replace(bench, web=web, search_key="key-123")
    assert ok(keyed, "web_search", query="q") == "1. T\n   https://u\n   d"
    method, _, headers, body = site.requests[-1]
    if provider == "brave":
        assert method == "GET" and headers["X-Subscription-Token"] == "key-123"
    else:
        assert method == "POST" and headers["Authorization"] == "Bearer key-123"
        assert json.loads(body)["query"] == "q"


def listed(bench: Workbench, network: Any) -> Workbench:
    """`bench` for a card whose network is `network`, both test names pinned to loopback."""
    profile = dataclasses.replace(bench.profile, network_hosts={
        "allowed.test": "127.0.0.1", "denied.test": "127.0.0.1"})
    return dataclasses.replace(bench, profile=profile, network=network)


def test_a_network_list_bounds_web_fetch_on_every_hop(bench: Workbench, site: Site) -> None:
    allowed = listed(bench, ("allowed.test",))  # default [web]: loopback refused, pins pass
    port = site.httpd.server_address[1]
    site.routes["/wal"] = (200, {"Content-Type": "text/html"}, PAGE)
    site.routes["/jump"] = (302, {"Location": f"http://denied.test:{port}/wal"}, b"")
    assert "# WAL" in ok(allowed, "web_fetch", url=f"http://allowed.test:{port}/wal")
    message = refused(allowed, "web_fetch", url=f"http://allowed.test:{port}/jump")
    assert "host 'denied.test' is not in this card's network list (allowed.test)" in message
    for url in (f"http://denied.test:{port}/wal", f"{site.url}/wal",
                f"http://ALLOWED.test.evil.test:{port}/wal"):
        assert "not in this card's network list" in refused(allowed, "web_fetch", url=url)
    assert [r[1] for r in site.requests] == ["/wal", "/jump"]


def test_the_cards_network_wins_over_its_profiles(bench: Workbench, site: Site) -> None:
    cut = listed(bench, False)  # a delegating card had none
    assert "this card has no network" in refused(cut, "web_fetch", url=f"{site.url}/x")
    searx = dataclasses.replace(listed(bench, ("allowed.test",)), web=WebSettings(
        search="searxng", search_url=site.url))
    assert "host '127.0.0.1' is not in this card's network list" in refused(
        searx, "web_search", query="q")
    assert site.requests == []
