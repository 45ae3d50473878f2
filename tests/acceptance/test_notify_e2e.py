"""Notifications end to end: `kanban notify add` and `kanban dispatch` as subprocesses,
scripted workers completing cards, events delivered to a local webhook that checks the HMAC.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.cards import NewCard
from tests.acceptance.conftest import BoardFiles
from tests.support.procs import kanban, query, start_dispatcher, stop, wait_until
from tests.support.webhook import WebhookReceiver

SECRET = "notify-secret"
WAIT_S = 40.0
# How long the receiver is down. Shrinking it keeps what is tested (cards finish and
# several retries reach the receiver while it is down); the figure is the default.
DOWN_S = float(os.environ.get("KANBAN_TEST_WEBHOOK_DOWN_S", "10"))


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as receiver:
        yield receiver


@pytest.fixture
def dispatch_env() -> dict[str, str]:
    dropped = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "KANBAN_WEBHOOK_SECRET", "http_proxy",
               "HTTP_PROXY")  # workers run `scripted:demo`; the receiver is local
    return {k: v for k, v in os.environ.items() if k not in dropped}


def configure(board: BoardFiles, **delivery: object) -> None:
    settings = {"webhook_secret": SECRET, "retry_base_s": 0.2, "retry_cap_s": 1.0,
                "poll_s": 0.05, "max_attempts": 100, **delivery}
    board.configure("[delivery]\n" + "".join(f"{k} = {json.dumps(v)}\n"
                                             for k, v in settings.items()))


def outbox(db: Path) -> list[tuple]:
    return query(db, "SELECT card_id, event, status FROM notify_outbox ORDER BY id")


def done_cards(db: Path, ids: list[int]) -> bool:
    marks = ",".join("?" * len(ids))
    return query(db, f"SELECT count(*) FROM card WHERE status = 'done' AND id IN ({marks})",
                 *ids) == [(len(ids),)]


def test_a_tree_subscription_delivers_each_done_card_once_signed(
        board: BoardFiles, hook: WebhookReceiver, dispatch_env: dict[str, str],
        tmp_path: Path) -> None:
    configure(board)
    root = board.add("root")
    child = board.add("child", parent_id=root)
    tree = [root, child, board.add("grandchild", parent_id=child)]
    stranger = board.add("not in the tree")
    kanban(board.path, "notify", "add", "--on", "done", "--tree", str(root),
           "--deliver", f"webhook:{hook.url}", env=dispatch_env)
    log = tmp_path / "dispatch.log"
    proc = start_dispatcher(board.path, "--max-workers", "2", env=dispatch_env, log=log)
    try:
        wait_until(lambda: done_cards(board.path, [*tree, stranger])
                   and {c for c, _, s in outbox(board.path) if s == "delivered"} == set(tree),
                   timeout=WAIT_S, what="the tree's cards done and each one delivered")
    finally:
        assert stop(proc) == 0, log.read_text()
    assert all(r.signed for r in hook.requests), "a body did not match its signature"
    assert sorted(r.json["card_id"] for r in hook.accepted) == sorted(tree)  # once per card
    assert {r.json["event"] for r in hook.accepted} == {"done"}
    assert len({r.headers["x-kanban-delivery"] for r in hook.accepted}) == len(tree)


def test_every_event_arrives_after_the_webhook_was_down_and_cards_kept_finishing(
        board: BoardFiles, hook: WebhookReceiver, dispatch_env: dict[str, str],
        tmp_path: Path) -> None:
    configure(board)
    hook.default = 503  # down
    kanban(board.path, "notify", "add", "--on", "done", "--deliver", f"webhook:{hook.url}",
           env=dispatch_env)
    log = tmp_path / "dispatch.log"
    proc = start_dispatcher(board.path, "--max-workers", "2", env=dispatch_env, log=log)
    try:
        went_down = time.monotonic()
        first = [board.add(f"early {n}") for n in range(3)]
        wait_until(lambda: done_cards(board.path, first), timeout=WAIT_S,
                   what="cards done while the webhook is down")
        later = [board.add(f"late {n}") for n in range(3)]
        wait_until(lambda: done_cards(board.path, later), timeout=WAIT_S,
                   what="more cards done while the webhook is still down")
        cards = first + later
        assert hook.accepted == []  # all of that while down
        wait_until(lambda: time.monotonic() - went_down >= DOWN_S
                   and retried_while_down(hook) >= 2, timeout=DOWN_S + WAIT_S,
                   what="the down time over, with retries while down")
        status = json.loads(kanban(board.path, "status", "--json", env=dispatch_env).stdout)
        [failing] = status["failing_notifications"]
        assert failing["target"] == f"webhook:{hook.url}" and failing["retrying"] >= 1
        hook.default = 200  # up again
        wait_until(lambda: {c for c, _, s in outbox(board.path) if s == "delivered"}
                   == set(cards), timeout=WAIT_S, what="every event delivered once it is up")
    finally:
        assert stop(proc) == 0, log.read_text()
    assert sorted({r.json["card_id"] for r in hook.accepted}) == sorted(cards)
    by_card: dict[int, set[str]] = defaultdict(set)
    for request in hook.requests:
        assert request.signed
        by_card[request.json["card_id"]].add(request.headers["x-kanban-delivery"])
    assert all(len(ids) == 1 for ids in by_card.values()), by_card  # repeats: the same id


def retried_while_down(hook: WebhookReceiver) -> int:
    """The most attempts any one event has had refused."""
    counts: dict[str, int] = defaultdict(int)
    for request in hook.requests:
        if request.status == 503:
            counts[request.headers["x-kanban-delivery"]] += 1
    return max(counts.values(), default=0)


def test_a_sigkilled_dispatcher_loses_no_event(
        board: BoardFiles, hook: WebhookReceiver, dispatch_env: dict[str, str],
        tmp_path: Path) -> None:
    # The first dispatcher's courier looks once, at its start, and then not for an hour:
    # the events its workers' transitions write wait in the outbox when it is killed.
    configure(board, poll_s=3600.0)
    kanban(board.path, "notify", "add", "--on", "done,failed", "--deliver",
           f"webhook:{hook.url}", env=dispatch_env)
    log = tmp_path / "dispatch.log"
    first = start_dispatcher(board.path, "--max-workers", "2", env=dispatch_env, log=log)
    try:
        cards = [board.add(f"card {n}") for n in range(4)]
        wait_until(lambda: done_cards(board.path, cards)
                   and len(outbox(board.path)) == len(cards), timeout=WAIT_S,
                   what="the cards done, each event in the outbox")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(WAIT_S)
    assert hook.requests == []
    assert {c for c, _, s in outbox(board.path) if s == "pending"} == set(cards)
    configure(board)  # the next dispatcher looks every 50 ms
    second = start_dispatcher(board.path, env=dispatch_env, log=log)
    try:
        wait_until(lambda: {s for _, _, s in outbox(board.path)} == {"delivered"},
                   timeout=WAIT_S, what="the next dispatcher delivering every event")
    finally:
        assert stop(second) == 0, log.read_text()
    assert sorted({r.json["card_id"] for r in hook.accepted}) == sorted(cards)


def test_kanban_run_notify_subscribes_the_lead_tree(
        board: BoardFiles, dispatch_env: dict[str, str], tmp_path: Path) -> None:
    got = tmp_path / "events.log"
    kanban(board.path, "run", "--detach", "-q", "--notify", f"file:{got}",
           "Write one line about the sea.", env=dispatch_env)
    [(scope, events, target)] = query(board.path, "SELECT scope, events, target FROM "
                                                  "notify_subscription")
    assert (scope, target) == ("tree", f"file:{got}") and "done" in events.split(",")
    refused = kanban(board.path, "run", "--notify", "webhook:ftp://x", "goal",
                     env=dispatch_env, check=False)
    assert refused.returncode != 0 and "webhook needs an http" in refused.stderr
    assert query(board.path, "SELECT count(*) FROM card") == [(1,)]  # nothing stored


def test_notify_cli_adds_lists_tests_and_removes(
        board: BoardFiles, dispatch_env: dict[str, str], tmp_path: Path) -> None:
    configure(board)
    got = tmp_path / "n.log"
    card = board.kb.add_card(NewCard(title="watched")).id
    added = json.loads(kanban(board.path, "notify", "add", "--on", "done,blocked", "--card",
                              str(card), "--deliver", f"file:{got}", "--json",
                              env=dispatch_env).stdout)
    assert added["scope"] == "card" and added["events"] == ["done", "blocked"]
    kanban(board.path, "notify", "test", str(added["id"]), env=dispatch_env)
    assert "test of notification" in got.read_text()
    kanban(board.path, "block", str(card), "--reason", "waiting on legal", env=dispatch_env)
    listed = json.loads(kanban(board.path, "notify", "list", "--json",
                               env=dispatch_env).stdout)
    assert listed[0]["undelivered"]["pending"] == 1
    delivered = json.loads(kanban(board.path, "notify", "deliver", "--json",
                                  env=dispatch_env).stdout)
    assert [(d["source"], d["status"]) for d in delivered] == [("notify", "delivered")]
    assert f"card #{card} blocked · watched\nwaiting on legal" in got.read_text()
    kanban(board.path, "notify", "rm", str(added["id"]), env=dispatch_env)
    assert json.loads(kanban(board.path, "notify", "list", "--json",
                             env=dispatch_env).stdout) == []
    bad = kanban(board.path, "notify", "add", "--on", "finished", "--deliver", f"file:{got}",
                 env=dispatch_env, check=False)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_the_board_page_names_a_failing_target_escaped(
        board: BoardFiles, dispatch_env: dict[str, str], tmp_path: Path) -> None:
    from tests.support.web import start_web

    configure(board, max_attempts=1)
    target = "webhook:http://127.0.0.1:9/<b>hook</b>"
    kanban(board.path, "notify", "add", "--on", "done", "--deliver", target, env=dispatch_env)
    card = board.add("finished")
    board.kb.complete(card, "r")
    kanban(board.path, "notify", "deliver", env=dispatch_env)  # port 9: refused
    assert outbox(board.path) == [(card, "done", "failed")]
    env = {k: v for k, v in dispatch_env.items() if not k.startswith("KANBAN_")}
    server = start_web(board.path, env={**env, "HOME": str(tmp_path)})
    try:
        client = server.client()
        try:
            page = client.get("/").text
        finally:
            client.close()
    finally:
        server.stop()
    assert 'id="notify-failing"' in page
    assert "http://127.0.0.1:9/&lt;b&gt;hook&lt;/b&gt; (1)" in page and "<b>hook" not in page


def test_a_dispatcher_stops_promptly_while_a_webhook_hangs_and_the_event_is_kept(
        board: BoardFiles, dispatch_env: dict[str, str], tmp_path: Path) -> None:
    configure(board, webhook_timeout_s=WAIT_S)
    with WebhookReceiver(secret=SECRET, hold=True, hold_timeout=WAIT_S) as slow:
        kanban(board.path, "notify", "add", "--on", "done", "--deliver",
               f"webhook:{slow.url}", env=dispatch_env)
        log = tmp_path / "dispatch.log"
        proc = start_dispatcher(board.path, env=dispatch_env, log=log)
        try:
            card = board.add("finished")
            slow.wait_for(1, timeout=WAIT_S)  # the lane is stuck in that POST
            began = time.monotonic()
            assert stop(proc, timeout=WAIT_S) == 0, log.read_text()
            assert time.monotonic() - began < WAIT_S / 2  # not held by the hung POST
        finally:
            slow.release()
            if proc.poll() is None:
                proc.kill()
    # Kept: the attempt was never settled, so its lease runs out and the next courier
    # sends it again (with the same delivery id).
    assert outbox(board.path) == [(card, "done", "sending")]
