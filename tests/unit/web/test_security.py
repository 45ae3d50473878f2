"""The web board's guard rules, without a server: binds, origins, tokens, cookies."""

from __future__ import annotations

import pytest

from kanban.errors import UsageError
from kanban.web.http import safe_next
from kanban.web.security import Access, check_bind, is_loopback, same_origin


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "localhost", "::1", "[::1]",
                                  "board.localhost"])
def test_loopback_names(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.com", "10.0.0.1",
                                  "localhost.example.com"])
def test_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_a_bind_beyond_loopback_needs_a_long_token() -> None:
    check_bind("127.0.0.1", "")  # loopback: a token is still the default, but may be off
    check_bind("0.0.0.0", "x" * 16)
    with pytest.raises(UsageError, match="without a token"):
        check_bind("0.0.0.0", "")
    with pytest.raises(UsageError, match="shorter than 16"):
        check_bind("192.168.1.5", "short")


def test_cookie_and_csrf_come_from_the_token_and_differ() -> None:
    access = Access(token="secret-token", port=8765)
    again = Access(token="secret-token", port=8765)
    assert access.session == again.session != access.csrf  # a restart keeps sessions
    assert "secret-token" not in access.session + access.csrf
    assert access.token_ok("secret-token") and not access.token_ok("secret-tokeN")
    assert access.csrf_ok(access.csrf) and not access.csrf_ok(None)
    assert not access.csrf_ok(access.session)
    header = access.cookie_header().decode()
    assert header.startswith("kanban_session_8765=")
    assert "HttpOnly" in header and "SameSite=Strict" in header and "Path=/" in header
    assert Access(token="other", port=8765).session != access.session


def test_no_token_means_no_token_ever_matches() -> None:
    access = Access(token="", port=1)
    assert not access.token_ok("")
    assert access.session != Access(token="", port=1).session  # random per server


@pytest.mark.parametrize(("headers", "ok"), [
    ({"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8765"}, True),
    ({"host": "localhost:9000", "origin": "http://localhost:9000"}, True),  # SSH tunnel
    ({"host": "127.0.0.1:8765", "origin": "http://evil.example"}, False),
    ({"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8766"}, False),
    ({"host": "127.0.0.1:8765", "origin": "null"}, False),
    ({"host": "127.0.0.1:8765", "sec-fetch-site": "cross-site"}, False),
    ({"host": "127.0.0.1:8765", "sec-fetch-site": "same-site"}, False),
    ({"host": "127.0.0.1:8765", "sec-fetch-site": "same-origin"}, True),
    ({"host": "127.0.0.1:8765"}, True),  # curl and scripts send neither
])
def test_same_origin(headers: dict[str, str], ok: bool) -> None:
    assert same_origin(headers) is ok


@pytest.mark.parametrize(("value", "expected"), [
    ("/cards/3", "/cards/3"), ("/?board=x", "/?board=x"), ("//evil.example/", "/"),
    ("/\\evil.example", "/"), ("https://evil.example", "/"), (None, "/"), (["/a"], "/"),
])
def test_form_posts_return_only_to_this_server(value: object, expected: str) -> None:
    assert safe_next(value, "/") == expected
