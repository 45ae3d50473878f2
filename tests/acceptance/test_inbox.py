"""`kanban inbox` over real subprocesses: a dispatcher's worker asks to run a command, a
human review and a block wait beside it; the CLI and the web board list all three, and the
command each prints answers it (issue 29, item 4)."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from kanban import approvals, claims
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.states import STATUS_NAMES
from kanban.transitions import Actor
from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import LLMServer, Reply, tool_reply, tool_results
from tests.support.procs import kanban, query
from tests.support.web import start_web

DANGEROUS = "echo approved-run > proof.txt; git push --force origin main"
HOSTILE = "git push --force <script>alert(1)</script>"


def asks_then_completes(body: dict[str, Any]) -> Reply:
    """Runs the dangerous command first and again when a person's decision arrives (the
    resumed conversation's last turn is a user's); then completes with its output."""
    messages = body.get("messages", [])
    fresh = not any(m.get("role") == "assistant" for m in messages)
    if fresh or messages[-1].get("role") == "user" and isinstance(messages[-1].get("content"),
                                                                  str):
        return tool_reply(("terminal", {"command": DANGEROUS}))
    return tool_reply(("kanban_complete", {"summary": "result: " + tool_results(body)[-1]}))


def in_review(kb: Kanban, title: str) -> int:
    card = kb.add_card(NewCard(title, review="human"))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
    kb.complete(card.id, "a draft", actor=Actor("w", claim.claim_token), gated=True)
    return card.id


def answers(text: str) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    current = 0
    for line in text.splitlines():
        if line.startswith("#"):
            current = int(line.split()[0][1:])
        elif line.strip().startswith("answer: "):
            found.setdefault(current, []).append(line.strip().removeprefix("answer: "))
    return found


def answer(db: Path, printed: str) -> None:
    args = shlex.split(printed.replace('"..."', '"decided by a person"'))
    assert args[0] == "kanban", printed
    kanban(db, *args[1:])


def test_the_inbox_lists_what_waits_and_its_commands_answer_it(board: BoardFiles) -> None:
    board.configure('[profiles.worker]\nmodel = "openai:test-model"\n'
                    'toolsets = ["kanban", "file", "terminal"]\napproval = "ask"\n')
    asking = board.add("push it", profile="worker", max_attempts=1)
    review = in_review(board.kb, "write the post")
    stuck = board.add("call the API")
    kanban(board.path, "block", str(stuck), "needs the API key")
    with LLMServer(responder=asks_then_completes) as server:
        env = {**os.environ, **server.env()}
        ran = kanban(board.path, "dispatch", "--once", env=env, check=False)
        assert ran.returncode == 4, ran.stderr  # a card this pass ran is blocked
        finished = [line for line in ran.stderr.splitlines() if f"#{asking} blocked" in line]
        assert finished and DANGEROUS in finished[0], ran.stderr
        assert f"kanban approve {asking}" in finished[0]
        shown = json.loads(kanban(board.path, "inbox", "--json").stdout)
        assert {(i["card_id"], i["kind"]) for i in shown["items"]} == {
            (asking, "approval"), (review, "review"), (stuck, "blocked")}
        assert [i["since"] for i in shown["items"]] == sorted(i["since"] for i in shown["items"])
        approval = next(i for i in shown["items"] if i["kind"] == "approval")
        assert [c["command"] for c in approval["commands"]] == [DANGEROUS]
        printed = answers(kanban(board.path, "inbox").stdout)
        answer(board.path, printed[asking][0])  # kanban approve
        answer(board.path, printed[review][0])  # kanban approve (passes the review)
        answer(board.path, printed[stuck][0])  # kanban unblock --note
        assert json.loads(kanban(board.path, "inbox", "--json").stdout)["items"] == []
        kanban(board.path, "dispatch", "--once", env=env)
    card = json.loads(kanban(board.path, "show", str(asking), "--json").stdout)["card"]
    assert card["status"] == "done", card
    # The approval round spent no attempt: one attempt of one, never `2/1`.
    assert "attempt 1/1" in kanban(board.path, "show", str(asking)).stdout
    # The person's unblock note is in the prompt of the unblocked card's next attempt.
    prompts = query(board.path, "SELECT m.content FROM message m JOIN run r ON r.id = "
                                "m.run_id WHERE r.card_id = ? AND m.role = 'user'", stuck)
    assert any("decided by a person" in content for (content,) in prompts), prompts


def waiting_on_approval(kb: Kanban, title: str, command: str) -> int:
    card = kb.add_card(NewCard(title))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
        approvals.request(conn, card.id, command, "force push", run_id=claim.run_id,
                          actor=Actor("w", claim.claim_token), now=kb.clock())
    return card.id


def test_the_web_board_has_the_same_inbox_and_answers_it(board: BoardFiles) -> None:
    asking = waiting_on_approval(board.kb, "<b>deploy</b>", HOSTILE)
    review = in_review(board.kb, "write the post")
    stuck = board.kb.add_card(NewCard("call the API")).id
    board.kb.block(stuck, "needs <i>the key</i>")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KANBAN_")}
    server = start_web(board.path, env=env)
    try:
        client = server.client()
        api = client.get("/api/inbox").json()
        assert api == json.loads(kanban(board.path, "inbox", "--json").stdout)
        assert [(i["card_id"], i["kind"]) for i in api["items"]] == [
            (asking, "approval"), (review, "review"), (stuck, "blocked")]
        assert 'id="inbox-link" href="/inbox"' in client.get("/").text
        # Every state is a filter on the web board too (issue 29 item 5), from one list.
        for status in STATUS_NAMES:
            listed = client.get("/api/cards", params={"status": status}).json()["cards"]
            column = client.get(f"/api/columns/{status}")
            assert column.status_code == 200, column.text
            wanted = {"review": [review], "blocked": [stuck, asking]}.get(status, [])  # newest 1st
            assert [c["id"] for c in listed] == wanted, status
        assert f"#{review}" in client.get("/", params={"status": "review"}).text
        page = client.get("/inbox").text
        assert "<script>alert" not in page and "<b>deploy" not in page and "<i>the" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;i&gt;the key" in page
        assert f"kanban approve {asking}" in page and f"kanban unblock {stuck}" in page
        forms = re.findall(r'action="(/api/cards/\d+/\w+)"', page)
        for wanted in (f"/api/cards/{asking}/approve", f"/api/cards/{review}/reject",
                       f"/api/cards/{stuck}/unblock"):
            assert wanted in forms
        csrf = {"X-CSRF-Token": server.csrf(client)}
        for path, body in ((f"/api/cards/{asking}/approve", {}),
                           (f"/api/cards/{review}/reject", {"feedback": "shorter"}),
                           (f"/api/cards/{stuck}/unblock", {"note": "key is in the vault"})):
            made = client.post(path, json=body, headers=csrf)
            assert made.status_code == 200, made.text
        assert client.get("/api/inbox").json()["items"] == []
        assert "nothing waits on a person" in client.get("/inbox").text
    finally:
        server.stop()
