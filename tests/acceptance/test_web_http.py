"""`kanban web` over real HTTP (httpx against the running server): access, CSRF, origins,
escaping, the JSON API against the CLI's `--json`, each action, the live stream."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import markupsafe
import pytest

from kanban import approvals, claims, run_activity, transitions
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from kanban.transitions import Actor
from tests.support.procs import KANBAN, kanban, wait_until
from tests.support.web import TOKEN, WebServer, next_event, sse_events, start_web

CARD_ITEM = re.compile(r'<li class="card st-\w+" id="card-[1-9]')  # card-0: board.js's template
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)> \" onmouseover=\"alert(3)"


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KANBAN_")}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"))
    return env


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    """One server over one board for the read-mostly tests of this module."""
    home = tmp_path_factory.mktemp("web")
    db_path = home / "kanban.db"
    db = open_database(DbLocation(str(db_path), "flag"), create=True)
    Kanban(db).ensure_board("default")
    db.dispose()
    server = start_web(db_path, env=clean_env(home))
    try:
        yield server
    finally:
        assert server.stop() in (0, 130), server.proc.stderr
        server.proc.poll()


@pytest.fixture
def kb(served: WebServer) -> Iterator[Kanban]:
    db = open_database(DbLocation(str(served.db), "flag"))
    try:
        yield Kanban(db)
    finally:
        db.dispose()


def cli_json(db: Path, *args: str) -> Any:
    return json.loads(kanban(db, *args, "--json").stdout)


# Access


GUARDED_GETS = ["/", "/cards/1", "/columns/ready", "/static/board.js", "/static/board.css",
                "/api/boards", "/api/board", "/api/cards", "/api/cards/1", "/api/cards/1/log",
                "/api/columns/ready", "/events"]
GUARDED_POSTS = ["/api/cards", "/api/cards/1/comment", "/api/cards/1/block",
                 "/api/cards/1/unblock", "/api/cards/1/cancel", "/api/cards/1/retry",
                 "/api/cards/1/priority", "/api/cards/1/dependency-policy",
                 "/api/cards/1/approve", "/api/cards/1/deny",
                 "/api/cards/1/reject", "/api/pause", "/api/resume"]


def test_every_request_without_the_token_gets_401(served: WebServer, kb: Kanban) -> None:
    kb.add_card(NewCard("secret plans"))
    anonymous = served.client(signed_in=False)
    for path in GUARDED_GETS:
        response = anonymous.get(path)
        assert response.status_code == 401, path
        assert "secret plans" not in response.text
    for path in GUARDED_POSTS:
        assert anonymous.post(path, json={"title": "x", "csrf": "x"}).status_code == 401, path
    assert anonymous.get("/?token=wrong-token").status_code == 401
    assert anonymous.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    forged = {"Cookie": f"kanban_session_{port(served)}=forged"}
    assert anonymous.get("/", headers=forged).status_code == 401
    assert "Bearer" in anonymous.get("/api/board").headers["www-authenticate"]


def port(served: WebServer) -> int:
    return int(served.base.rsplit(":", 1)[1])


def test_the_token_is_traded_for_an_httponly_strict_cookie(served: WebServer) -> None:
    client = served.client(signed_in=False, follow_redirects=False)
    response = client.get(f"/?board=default&token={TOKEN}")
    assert response.status_code == 303
    assert response.headers["location"] == "/?board=default"  # the token leaves the address
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"kanban_session_{port(served)}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    assert client.get("/").status_code == 200  # the cookie alone now suffices
    bearer = served.client(signed_in=False, headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.get("/api/boards").json()["boards"][0]["name"] == "default"


def test_only_localhost_names_reach_a_loopback_board(served: WebServer) -> None:
    client = served.client()
    rebound = client.get("/", headers={"Host": f"evil.example:{port(served)}"})
    assert rebound.status_code == 421  # DNS rebinding: another site's name for 127.0.0.1
    assert client.get("/", headers={"Host": f"localhost:{port(served)}"}).status_code == 200


def test_security_headers(served: WebServer) -> None:
    response = served.client().get("/")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "no-store"
    assert float(response.headers["server-timing"].split("dur=")[1]) >= 0


# CSRF and origins


def test_writes_need_the_csrf_token(served: WebServer, kb: Kanban) -> None:
    client = served.client()
    before = len(kb.list_cards())
    assert client.post("/api/cards", json={"title": "no csrf"}).status_code == 403
    assert client.post("/api/cards", json={"title": "forged", "csrf": "0" * 64}
                       ).status_code == 403
    assert client.post("/api/cards", json={"title": "wrong header"},
                       headers={"X-CSRF-Token": "abc"}).status_code == 403
    assert len(kb.list_cards()) == before
    csrf = served.csrf(client)
    made = client.post("/api/cards", json={"title": "with csrf"}, headers={"X-CSRF-Token": csrf})
    assert made.status_code == 201 and made.json()["title"] == "with csrf"
    form = client.post("/api/cards", data={"title": "form field", "csrf": csrf})
    assert form.status_code == 201
    script = served.client(signed_in=False, headers={"Authorization": f"Bearer {TOKEN}"})
    assert script.post("/api/cards", json={"title": "by a script"}).status_code == 201


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
])
def test_cross_origin_writes_are_refused(served: WebServer, kb: Kanban,
                                         headers: dict[str, str]) -> None:
    client = served.client()
    csrf = served.csrf(client)
    before = len(kb.list_cards())
    response = client.post("/api/cards", json={"title": "from elsewhere"},
                           headers={"X-CSRF-Token": csrf, **headers})
    assert response.status_code == 403
    assert len(kb.list_cards()) == before
    same = client.post("/api/cards", json={"title": "same origin"},
                       headers={"X-CSRF-Token": csrf, "Origin": served.base,
                                "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 201


# Escaping


def test_hostile_text_is_escaped_everywhere(served: WebServer, kb: Kanban) -> None:
    card = kb.add_card(NewCard(HOSTILE, goal=f"</pre>{HOSTILE}", context="<!-- -->"))
    kb.comment(card.id, HOSTILE)
    with kb.db.write() as conn:
        mine = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
    with kb.db.write() as conn:
        claims.append_message(conn, mine.run_id, 1, {"role": "tool", "content": HOSTILE,
                                                     "name": HOSTILE}, now=kb.clock())
        claims.append_message(conn, mine.run_id, 2, {
            "role": "assistant", "content": HOSTILE,
            "tool_calls": [{"id": "1", "function": {"name": HOSTILE, "arguments": HOSTILE}}]},
            now=kb.clock())
    kb.heartbeat(card.id, mine.claim_token, run_id=mine.run_id, lease_s=30, note=HOSTILE)
    stuck = kb.add_card(NewCard("stuck"))
    kb.block(stuck.id, HOSTILE)
    client = served.client()
    board = client.get("/").text
    why = board.split(f'id="card-{stuck.id}"', 1)[1].split('class="why"', 1)[1].split("</span>")[0]
    assert why == ">— " + str(markupsafe.escape(HOSTILE)), why  # the reason, as text
    drawer = client.get(f"/cards/{stuck.id}?partial=1").text
    assert '<section class="text blocked-because">\n    <h3>blocked because</h3>' in drawer
    assert "<h3>error</h3>" not in drawer
    pages = [client.get("/"), client.get(f"/cards/{card.id}"),
             client.get(f"/cards/{card.id}?partial=1"), client.get("/columns/running"),
             client.get("/?q=script")]
    for response in pages:
        html = response.text
        assert response.status_code == 200
        assert "<script>alert" not in html and "<img src=x" not in html
        assert '" onmouseover="' not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, response.url
    drawer = pages[2].text
    assert drawer.count("&lt;img src=x onerror=alert(2)&gt;") >= 5  # title, goal, comment, …
    data = client.get(f"/api/cards/{card.id}").json()
    assert data["card"]["title"] == HOSTILE  # JSON carries the text as it is


def test_controls_in_stored_text_are_spelled_out_on_pages(served: WebServer,
                                                         kb: Kanban) -> None:
    card = kb.add_card(NewCard("plain title"))
    with kb.db.write() as conn:  # data from before the input filter, or a model's text
        conn.run("UPDATE card SET title = :t, goal = :t WHERE id = :id",
                 {"t": "evil\u202etxt.exe \x1b]0;pwn\x07 \x9b2J", "id": card.id})
    client = served.client()
    for path in ("/", f"/cards/{card.id}", f"/cards/{card.id}?partial=1"):
        html = client.get(path).text
        assert not any(c in html for c in "\u202e\x1b\x07\x9b"), path
        assert "evil\\u202etxt.exe" in html, path


def test_the_drawer_says_what_a_failed_dependency_does(served: WebServer, kb: Kanban) -> None:
    dep = kb.add_card(NewCard("dependency"))
    own = kb.add_card(NewCard("cancels", depends_on=[dep.id], on_dependency_failure="cancel"))
    board = kb.add_card(NewCard("blocks", depends_on=[dep.id]))
    client = served.client()
    drawer = client.get(f"/cards/{own.id}?partial=1").text
    assert "if one fails or is cancelled: cancel (this card&#39;s setting)" in drawer
    assert "block (the board&#39;s default)" in client.get(f"/cards/{board.id}?partial=1").text
    assert client.get(f"/api/cards/{own.id}").json()["on_dependency_failure"] == "cancel"


def test_the_drawer_counts_attempts_as_kanban_show_does(served: WebServer, kb: Kanban) -> None:
    card = kb.add_card(NewCard("handed back twice", max_attempts=2))
    for _ in range(2):  # a dispatcher restarting: claims that spent no attempt
        with kb.db.write() as conn:
            claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
            transitions.hand_back(conn, card.id, "restart", now=kb.clock(),
                                  actor=Actor("dispatcher", claim.claim_token))
    with kb.db.write() as conn:
        claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
    drawer = served.client().get(f"/cards/{card.id}?partial=1").text
    runs = re.findall(r"run \d+ · ([^·]+) · ", drawer)
    assert [r.strip() for r in runs] == ["attempt 1", "no attempt spent", "no attempt spent"]
    claimed = re.findall(r"<td>claimed</td><td>[^<]*</td><td>ready → running; ([^<]+)</td>",
                         drawer)
    assert claimed == ["no attempt spent", "no attempt spent", "attempt 1"]
    assert "attempt=" not in drawer and "attempt 3" not in drawer


# The JSON API is the CLI's --json


def test_json_api_has_the_cli_shapes(served: WebServer, kb: Kanban) -> None:
    for i in range(4):
        kb.add_card(NewCard(f"filler {i}"))
    lead = kb.add_card(NewCard("lead card", goal="split", board="default"))
    child = kb.add_card(NewCard("child card", parent_id=lead.id))
    kb.link(child.id, lead.id)
    kb.comment(lead.id, "hello")
    client = served.client()
    assert client.get("/api/boards").json() == cli_json(served.db, "boards", "list")
    assert client.get("/api/board?per_column=10").json() == cli_json(served.db, "board")
    assert client.get("/api/cards").json() == cli_json(served.db, "list")
    ready = client.get("/api/cards?status=ready&limit=3").json()
    assert ready == cli_json(served.db, "list", "--status", "ready", "--limit", "3")
    assert ready["more"] == ready["total"] - 3
    rest = client.get(f"/api/cards?status=ready&before={ready['cards'][-1]['id']}").json()
    assert rest["total"] == ready["more"]
    for card_id in (lead.id, child.id):
        assert client.get(f"/api/cards/{card_id}").json() == cli_json(
            served.db, "show", str(card_id))
        assert client.get(f"/api/cards/{card_id}/log").json() == cli_json(
            served.db, "log", str(card_id))
    assert client.get("/api/cards/999999").json() == {"error": "no card #999999"}
    assert client.get("/api/cards?status=nope").status_code == 400


def test_columns_page_through_a_big_board(served: WebServer, kb: Kanban) -> None:
    kb.create_board("big")
    for i in range(45):
        kb.add_card(NewCard(f"big {i}", board="big", priority=i % 2))
    client = served.client()
    board = client.get("/?board=big").text
    assert len(CARD_ITEM.findall(board)) == 20 and "+25 more" in board
    full = [c["id"] for c in cli_json(served.db, "board", "--board", "big",
                                      "--per-column", "100")["columns"]["ready"]]
    seen, after = [], ""
    while True:
        page = client.get("/api/columns/ready", params={"board": "big", "after": after,
                                                        "limit": 20}).json()
        seen += [c["id"] for c in page["cards"]]
        if not page["next"]:
            break
        after = page["next"]
    assert seen == full
    # with JavaScript off the "more" link leads to a page of the column
    html = client.get("/columns/ready", params={"board": "big"}).text
    assert len(CARD_ITEM.findall(html)) == 45 and "next page" not in html


# Actions: the CLI's library calls, the same events


def events_of(kb: Kanban, card_id: int) -> list[tuple[str, str, dict[str, Any]]]:
    """A card's events without their ids (comment ids differ between two cards)."""
    detail = kb.detail(card_id)
    return [(e.kind, e.actor, {k: v for k, v in json.loads(e.data).items() if k != "comment_id"})
            for e in detail.events]


def test_each_action_records_what_the_cli_records(served: WebServer, kb: Kanban) -> None:
    client = served.client()
    csrf = {"X-CSRF-Token": served.csrf(client)}
    web_card = client.post("/api/cards", json={"title": "via web", "priority": 2},
                           headers=csrf).json()["id"]
    cli_card = int(kanban(served.db, "add", "via cli", "--priority", "2").stdout.strip()[1:])

    steps: list[tuple[str, dict[str, Any], list[str]]] = [
        ("comment", {"body": "first"}, ["comment", "{id}", "first"]),
        ("priority", {"priority": 7}, ["edit", "{id}", "--priority", "7"]),
        ("block", {"reason": "needs a human"}, ["block", "{id}", "--reason", "needs a human"]),
        ("unblock", {"note": "go on"}, ["unblock", "{id}", "--note", "go on"]),
        ("cancel", {"reason": "not now"}, ["cancel", "{id}", "--reason", "not now"]),
        ("retry", {}, ["retry", "{id}"]),
    ]
    for action, body, cli_args in steps:
        response = client.post(f"/api/cards/{web_card}/{action}", json=body, headers=csrf)
        assert response.status_code in (200, 201), (action, response.text)
        kanban(served.db, *[a.format(id=cli_card) for a in cli_args])
    assert events_of(kb, web_card) == events_of(kb, cli_card)
    assert kb.card(web_card).to_json() | {"id": 0, "title": "", "created_at": "",
                                          "updated_at": "", "run_after": ""} == \
        kb.card(cli_card).to_json() | {"id": 0, "title": "", "created_at": "",
                                       "updated_at": "", "run_after": ""}


def waiting_on_approval(kb: Kanban, title: str, command: str) -> int:
    """A card whose worker asked to run a dangerous command (approval = "ask")."""
    card = kb.add_card(NewCard(title))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
        approvals.request(conn, card.id, command, "rm -rf", run_id=claim.run_id,
                          actor=Actor(f"card:#{card.id}", claim.claim_token), now=kb.clock())
    return card.id


def decisions(kb: Kanban, card_id: int) -> list[tuple[str, str, dict[str, Any]]]:
    """A card's events from the decision on, without the approval's id."""
    events = events_of(kb, card_id)
    start = next(i for i, e in enumerate(events) if e[0] == "approval_requested") + 1
    return [(kind, actor, {k: v for k, v in data.items() if k != "approval_id"})
            for kind, actor, data in events[start:]]


def test_approve_and_deny_are_the_cli_calls(served: WebServer, kb: Kanban) -> None:
    client = served.client()
    csrf = {"X-CSRF-Token": served.csrf(client)}
    hostile = "rm -rf build/ <script>alert(1)</script>"
    for verb, body, cli_args in (("approve", {"note": "fine"}, ["--note", "fine"]),
                                 ("deny", {"reason": "no"}, ["--reason", "no"])):
        web_card = waiting_on_approval(kb, f"web {verb}", hostile)
        cli_card = waiting_on_approval(kb, f"cli {verb}", hostile)
        drawer = client.get(f"/cards/{web_card}?partial=1").text
        assert "waiting for approval" in drawer and f"/api/cards/{web_card}/approve" in drawer
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in drawer and "<script>alert" not in drawer
        assert 'class="waits" title="rm -rf build/ &lt;script&gt;' in client.get("/").text
        made = client.post(f"/api/cards/{web_card}/{verb}", json=body, headers=csrf)
        assert made.status_code == 200 and made.json()["status"] == "ready", made.text
        kanban(served.db, verb, str(cli_card), *cli_args)
        assert decisions(kb, web_card) == decisions(kb, cli_card)
        kinds = [k for k, _, _ in decisions(kb, web_card)]
        assert kinds == [{"approve": "approval_approved", "deny": "approval_denied"}[verb],
                         "unblock", "commented"]
        assert [(a.decision, a.reason) for a in kb.approvals(web_card)] == [
            (a.decision, a.reason) for a in kb.approvals(cli_card)]
        again = client.post(f"/api/cards/{web_card}/{verb}", json=body, headers=csrf)
        assert again.status_code == 409 and "no pending approval" in again.json()["error"]


def in_review(kb: Kanban, title: str) -> int:
    """A human-gated card its worker completed: it waits in review."""
    card = kb.add_card(NewCard(title, review="human"))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
    kb.complete(card.id, "draft <b>one</b>", actor=Actor("w", claim.claim_token), gated=True)
    return card.id


def review_moves(kb: Kanban, card_id: int) -> list[tuple[str, str, str]]:
    return [(e.kind, json.loads(e.data).get("from", ""), json.loads(e.data).get("to", ""))
            for e in kb.detail(card_id).events if e.kind not in ("created", "claimed")]


def test_review_gate_actions_are_the_cli_calls(served: WebServer, kb: Kanban) -> None:
    client = served.client()
    csrf = {"X-CSRF-Token": served.csrf(client)}
    web_card, cli_card = in_review(kb, "web review"), in_review(kb, "cli review")
    assert 'class="column st-review"' in client.get("/").text
    drawer = client.get(f"/cards/{web_card}?partial=1").text
    assert "in review" in drawer and f"/api/cards/{web_card}/reject" in drawer
    hostile = "<script>alert(1)</script> more detail"
    sent = client.post(f"/api/cards/{web_card}/reject", json={"feedback": hostile},
                       headers=csrf)
    assert sent.status_code == 200 and sent.json()["status"] == "ready", sent.text
    kanban(served.db, "reject", str(cli_card), "--feedback", hostile)
    drawer = client.get(f"/cards/{web_card}?partial=1").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; more detail" in drawer
    assert "<script>alert" not in drawer
    empty = client.post(f"/api/cards/{cli_card}/reject", json={"feedback": ""}, headers=csrf)
    assert empty.status_code in (400, 409)
    for card_id in (web_card, cli_card):
        with kb.db.write() as conn:
            claim = claims.claim_card(conn, card_id, now=kb.clock(), lease_s=30)
        kb.complete(card_id, "draft two", actor=Actor("w", claim.claim_token), gated=True)
    passed = client.post(f"/api/cards/{web_card}/approve", json={"note": "good"},
                         headers=csrf)
    assert passed.status_code == 200 and passed.json()["status"] == "done", passed.text
    kanban(served.db, "approve", str(cli_card), "--note", "good")
    assert review_moves(kb, web_card) == review_moves(kb, cli_card)
    assert [k for k, _, _ in review_moves(kb, web_card)] == [
        "review_requested", "changes_requested", "commented", "review_requested",
        "review_passed", "commented"]


def test_pause_and_resume_a_board_and_spawning(served: WebServer, kb: Kanban) -> None:
    client = served.client()
    csrf = {"X-CSRF-Token": served.csrf(client)}
    assert client.post("/api/pause", json={"board": "default"}, headers=csrf).json() == {
        "board": "default", "paused": True, "paused_globally": False}
    assert kb.pause_state("default").board_paused
    assert "spawning paused (board)" in client.get("/").text
    client.post("/api/pause", json={}, headers=csrf)
    assert kb.pause_state(None).global_paused
    client.post("/api/resume", json={}, headers=csrf)
    client.post("/api/resume", json={"board": "default"}, headers=csrf)
    assert not kb.pause_state("default").paused
    kinds = [e.kind for e in kb.detail(kb.add_card(NewCard("probe")).id).events]
    assert kinds == ["created"]
    with kb.db.read() as conn:
        tail = conn.all("SELECT kind, board, actor FROM event WHERE card_id IS NULL "
                        "ORDER BY id DESC LIMIT 4")
    assert [tuple(r) for r in reversed(tail)] == [
        ("paused", "default", "user"), ("paused", "*", "user"),
        ("resumed", "*", "user"), ("resumed", "default", "user")]
    assert client.post("/api/pause", json={"board": "nope"}, headers=csrf).status_code == 404


def test_forms_work_with_javascript_off(served: WebServer, kb: Kanban) -> None:
    card = kb.add_card(NewCard("form card"))
    client = served.client(follow_redirects=False)
    csrf = served.csrf(client)
    html = {"Accept": "text/html,application/xhtml+xml"}
    done = client.post(f"/api/cards/{card.id}/comment", headers=html,
                       data={"body": "typed in a form", "csrf": csrf,
                             "next": f"/cards/{card.id}"})
    assert done.status_code == 303 and done.headers["location"] == f"/cards/{card.id}"
    assert "typed in a form" in client.get(f"/cards/{card.id}").text
    away = client.post(f"/api/cards/{card.id}/priority", headers=html,
                       data={"priority": "3", "csrf": csrf, "next": "//evil.example/"})
    assert away.headers["location"] == f"/cards/{card.id}"
    refused = client.post(f"/api/cards/{card.id}/unblock", headers=html,
                          data={"csrf": csrf, "next": "/"})
    assert refused.status_code == 409
    assert "cannot unblock" in refused.text and refused.headers["content-type"].startswith(
        "text/html")


def test_the_dependency_policy_is_set_from_the_form_and_the_drawer(served: WebServer,
                                                                   kb: Kanban) -> None:
    dep = kb.add_card(NewCard("dependency"))
    client = served.client(follow_redirects=False)
    csrf = served.csrf(client)
    form = client.post("/api/cards", data={"title": "follows", "depends_on": str(dep.id),
                                           "on_dependency_failure": "cancel", "csrf": csrf})
    assert form.status_code == 201
    card = form.json()
    assert card["on_dependency_failure"] == "cancel"
    plain = client.post("/api/cards", data={"title": "board's", "on_dependency_failure": "",
                                            "csrf": csrf})
    assert plain.json()["on_dependency_failure"] is None
    drawer = client.get(f"/cards/{card['id']}").text
    assert f'action="/api/cards/{card["id"]}/dependency-policy"' in drawer
    assert '<option value="cancel" selected>' in drawer
    back = client.post(f"/api/cards/{card['id']}/dependency-policy",
                       json={"on_dependency_failure": "board"},
                       headers={"X-CSRF-Token": csrf})
    assert back.status_code == 200 and back.json()["changed"] == ["on_dependency_failure"]
    assert kb.card(card["id"]).on_dependency_failure is None
    bad = client.post(f"/api/cards/{card['id']}/dependency-policy",
                      json={"on_dependency_failure": "drop"}, headers={"X-CSRF-Token": csrf})
    assert bad.status_code == 400 and "must be block or cancel" in bad.text
    assert kb.card(card["id"]).on_dependency_failure is None  # nothing stored


def test_bad_input_gets_one_clear_error(served: WebServer, kb: Kanban) -> None:
    card = kb.add_card(NewCard("target"))
    client = served.client()
    csrf = {"X-CSRF-Token": served.csrf(client)}
    cases = [
        ("/api/cards", {"title": ""}, 400, "title must not be empty"),
        ("/api/cards", {"title": "x", "profile": "nope"}, 400, "unknown profile 'nope'"),
        ("/api/cards", {"title": "x", "priority": "high"}, 400, "priority must be a whole"),
        ("/api/cards", {"title": "x", "depends_on": [999999]}, 404, "no card #999999"),
        (f"/api/cards/{card.id}/block", {"reason": " "}, 400, "reason must not be empty"),
        (f"/api/cards/{card.id}/retry", {}, 409, "cannot retry"),
        ("/api/cards/999999/comment", {"body": "x"}, 404, "no card #999999"),
    ]
    for path, body, status, message in cases:
        response = client.post(path, json=body, headers=csrf)
        assert response.status_code == status, (path, response.text)
        assert message in response.json()["error"]
    raw = client.post("/api/cards", content=b"{not json", headers={
        **csrf, "Content-Type": "application/json"})
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]
    huge = client.post("/api/cards", content=b"x" * 1_100_000, headers={
        **csrf, "Content-Type": "application/json"})
    assert huge.status_code == 400 and "limit" in huge.json()["error"]


# The live stream


def test_the_stream_pushes_a_cli_commit_and_catches_up(served: WebServer, kb: Kanban) -> None:
    client = served.client()
    cursor = client.get("/api/board").json()["cursor"]
    with client.stream("GET", "/events", params={"board": "default", "after": cursor}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
        card_id = int(kanban(served.db, "add", "pushed <b>live</b>").stdout.strip()[1:])
        event = next_event(events, lambda e: e.event == "board" and any(
            c["id"] == card_id for c in e.data.get("cards", [])))
    card = next(c for c in event.data["cards"] if c["id"] == card_id)
    assert card["title"] == "pushed <b>live</b>" and card["status"] == "ready"
    assert event.data["counts"]["ready"] >= 1 and int(event.id) > cursor
    # a browser reconnecting with Last-Event-ID is sent what it missed meanwhile
    missed = int(kanban(served.db, "add", "while away").stdout.strip()[1:])
    with client.stream("GET", "/events", params={"board": "default"},
                       headers={"Last-Event-ID": event.id}) as r:
        caught = next_event(sse_events(r), lambda e: e.event == "board")
    assert missed in [c["id"] for c in caught.data["cards"]]
    assert card_id not in [c["id"] for c in caught.data["cards"]]
    with client.stream("GET", "/events", headers={"Last-Event-ID": str(10**9)}) as r:
        assert next_event(sse_events(r), lambda e: True).event == "reset"
    assert client.get("/events", params={"board": "nope"}).status_code == 404


def test_running_cards_show_live_activity(served: WebServer, kb: Kanban) -> None:
    card = kb.add_card(NewCard("busy worker"))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
    client = served.client()
    cursor = client.get("/api/board").json()["cursor"]
    activity = {"phase": "tools", "tools": ["terminal", "<b>x</b>"], "turn": 3,
                "max_turns": 20, "tokens": 12345, "cost": 0.0123}
    with client.stream("GET", "/events", params={"after": cursor}) as r:
        events = sse_events(r)
        next_event(events, lambda e: e.event == "board")  # the claim
        with kb.db.write() as conn:
            run_activity.record_activity(conn, claim.run_id, card.id, claim.claim_token, activity,
                                   now=kb.clock())
        pushed = next_event(events, lambda e: any(
            c["id"] == card.id and c["activity"] for c in e.data.get("cards", [])))
    (live,) = [c for c in pushed.data["cards"] if c["id"] == card.id]
    assert live["activity"] == activity
    assert live["doing"] == "terminal, <b>x</b> · t3/20 · 12.3k · $0.0123"
    html = client.get("/").text
    assert "terminal, &lt;b&gt;x&lt;/b&gt; · t3/20 · 12.3k · $0.0123" in html
    drawer = client.get(f"/cards/{card.id}?partial=1").text
    assert "running terminal, &lt;b&gt;x&lt;/b&gt; · turn 3/20 · 12.3k tokens" in drawer


# Starting and stopping


def test_refuses_to_serve_unsafely(tmp_path: Path) -> None:
    db = tmp_path / "kanban.db"
    kanban(db, "init")
    env = clean_env(tmp_path)
    cases = [
        (["--host", "0.0.0.0", "--token", ""], "without a token"),
        (["--host", "0.0.0.0", "--token", "short"], "shorter than 16"),
        (["--board", "nope"], "no board named 'nope'"),
    ]
    for args, message in cases:
        done = kanban(db, "web", "--port", "0", *args, env=env, check=False)
        assert done.returncode != 0 and message in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = kanban(db, "web", "--port", str(busy), env=env, check=False)
    assert done.returncode != 0 and "the port is in use" in done.stderr
    done = kanban(db, "web", "--token", "", "--port", "0", "--host", "256.1.1.1", env=env,
                  check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr


def test_ctrl_c_stops_the_server_with_streams_open(tmp_path: Path) -> None:
    db = tmp_path / "kanban.db"
    kanban(db, "init")
    server = start_web(db, env=clean_env(tmp_path))
    try:
        client = server.client()
        with client.stream("GET", "/events") as stream:
            assert next(stream.iter_lines()).startswith("retry:")
            server.proc.send_signal(signal.SIGINT)
            assert server.proc.wait(timeout=20) == 130
        assert server.proc.stderr is not None
        assert "Traceback" not in server.proc.stderr.read()
    finally:
        server.stop()  # its pipes closed, whatever failed


def test_an_empty_token_is_allowed_on_loopback_only(tmp_path: Path) -> None:
    db = tmp_path / "kanban.db"
    kanban(db, "init")
    server = start_web(db, token="", env=clean_env(tmp_path))
    try:
        assert "?token=" not in server.url
        client = server.client(signed_in=False)
        assert client.get("/api/boards").status_code == 200
        assert client.post("/api/cards", json={"title": "x"}).status_code == 403  # CSRF still
    finally:
        server.stop()


def test_other_commands_never_import_the_web_stack(tmp_path: Path) -> None:
    probe = ("import sys, kanban.cli.app; heavy = {'starlette', 'uvicorn', 'jinja2', "
             "'aiosqlite', 'kanban.web'}; print(sorted(heavy & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_open_starts_the_browser_at_the_tokened_address(tmp_path: Path) -> None:
    db = tmp_path / "kanban.db"
    kanban(db, "init")
    opened = tmp_path / "opened.txt"
    browser = (f"{sys.executable} -c \"import sys, pathlib; "
               f"pathlib.Path('{opened}').write_text(sys.argv[1])\" %s")
    server = start_web(db, "--open", env={**clean_env(tmp_path), "BROWSER": browser})
    try:
        wait_until(lambda: opened.exists() and opened.read_text(), timeout=30,
                   what="the browser to be started")
        assert opened.read_text() == server.url and "?token=" in server.url
    finally:
        server.stop()


@pytest.mark.postgres
def test_a_postgresql_board_is_served_live(pg_url: str, tmp_path: Path) -> None:
    env = {**clean_env(tmp_path), "KANBAN_DB": pg_url}  # `--db` takes paths, not URLs
    subprocess.run([*KANBAN, "init"], env=env, check=True, timeout=60, capture_output=True)
    server = start_web(pg_url, env=env)
    try:
        client = server.client()
        csrf = {"X-CSRF-Token": server.csrf(client)}
        cursor = client.get("/api/board").json()["cursor"]
        with client.stream("GET", "/events", params={"after": cursor}) as r:
            made = client.post("/api/cards", json={"title": "on postgres"}, headers=csrf)
            assert made.status_code == 201
            event = next_event(sse_events(r), lambda e: e.event == "board" and "cards" in e.data)
        assert [c["title"] for c in event.data["cards"]] == ["on postgres"]
        board = subprocess.run([*KANBAN, "board", "--per-column", "20", "--json"], env=env,
                               check=True, timeout=60, capture_output=True, text=True).stdout
        assert client.get("/api/board").json() == json.loads(board)
    finally:
        server.stop()


def test_the_drawer_says_when_a_cost_is_unknown(served: WebServer, kb: Kanban) -> None:
    """A model without a known price is not free: the drawer says so, as `kanban show` does."""
    card = kb.add_card(NewCard("on a local model"))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
        claims.record_usage(conn, claim.run_id, card.id, "openai:local-llama",
                            input_tokens=10, output_tokens=1, cached_tokens=0,
                            now=kb.clock(), cost=None)
    drawer = served.client().get(f"/cards/{card.id}?partial=1").text
    assert drawer.count("unknown (1 unpriced call)") == 2, drawer  # the card's and its run's
