"""Notifications: subscriptions matched in the transition's transaction, the outbox, and the
shared courier that delivers it (every target kind, retries, one lane per target)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban import approvals
from kanban.cards import NewCard
from kanban.cli.status_text import notification_lines
from kanban.delivery.courier import Courier
from kanban.delivery.rows import DeliveryStatus
from kanban.delivery.senders import Context
from kanban.errors import CardNotFound, ValidationError
from kanban.notify.manage import SubscriptionSpec
from kanban.notify.queue import NotifyQueue
from kanban.notify.service import Notifications
from kanban.queries import board_snapshot
from kanban.service import Kanban
from kanban.state.config import Config, Delivery
from kanban.state.errors import ConfigError
from kanban.state.store import Database
from tests.support.db import STORES, FakeClock, claim_one, fail, worker
from tests.support.procs import wait_until
from tests.support.webhook import WebhookReceiver

SECRET = "s3cret"
SETTINGS = Delivery(webhook_secret=SECRET, retry_base_s=10.0, retry_cap_s=60.0, max_attempts=4,
                    webhook_timeout_s=10.0, command_timeout_s=10.0)
EVERYTHING = ("done", "failed", "blocked", "approval", "review", "cancelled")


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as receiver:
        yield receiver


def notes(db: Database, clock: FakeClock, home: Path, **config: object) -> Notifications:
    return Notifications(db, "default", config=Config(delivery=SETTINGS, **config),  # type: ignore[arg-type]
                         env=dict(os.environ), home=home, clock=clock)


def courier(db: Database, clock: FakeClock, home: Path) -> Courier:
    return Courier(db, Context(SETTINGS, SECRET, home, dict(os.environ)), [NotifyQueue()],
                   clock=clock)


def subscribe(db: Database, clock: FakeClock, home: Path, target: str, *,
              events: tuple[str, ...] = EVERYTHING, scope: str = "board",
              value: str = "") -> int:
    return notes(db, clock, home).add(SubscriptionSpec(events, scope, value, target)).id


def outbox(db: Database) -> list[tuple[int, str, str]]:
    with db.read() as conn:
        return [(int(c), str(e), str(s)) for c, e, s in conn.all(
            "SELECT card_id, event, status FROM notify_outbox ORDER BY id")]


def payloads(db: Database) -> list[dict[str, object]]:
    with db.read() as conn:
        return [json.loads(p) for p in conn.column("SELECT payload FROM notify_outbox ORDER BY id")]


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_board_without_subscriptions_writes_no_outbox_row(
        db: Database, kb: Kanban) -> None:
    card = kb.add_card(NewCard(title="plain")).id
    kb.complete(card, "done", actor=worker(claim_one(kb, card)))
    other = kb.add_card(NewCard(title="other")).id
    claim_one(kb, other)
    fail(kb, other)
    assert outbox(db) == []


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_worker_completing_a_card_queues_its_event_in_the_same_transaction(
        db: Database, kb: Kanban, clock: FakeClock, tmp_path: Path) -> None:
    card = kb.add_card(NewCard(title="report")).id
    subscribe(db, clock, tmp_path, f"file:{tmp_path / 'n.log'}", events=("done",))
    kb.complete(card, "all good", actor=worker(claim_one(kb, card)))  # PostgreSQL's fast path
    assert outbox(db) == [(card, "done", "pending")]
    [payload] = payloads(db)
    assert payload["text"] == "all good" and payload["title"] == "report"
    assert payload["from"] == "running" and payload["status"] == "done"


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_tree_card_and_profile_scopes_match_only_their_cards(
        db: Database, kb: Kanban, clock: FakeClock, tmp_path: Path) -> None:
    root = kb.add_card(NewCard(title="root")).id
    child = kb.add_card(NewCard(title="child", parent_id=root)).id
    grandchild = kb.add_card(NewCard(title="grandchild", parent_id=child)).id
    stranger = kb.add_card(NewCard(title="stranger")).id
    target = f"file:{tmp_path / 'n.log'}"
    subscribe(db, clock, tmp_path, target, events=("done",), scope="tree", value=str(child))
    subscribe(db, clock, tmp_path, target, events=("done",), scope="card", value=str(stranger))
    for card in (root, child, grandchild, stranger):
        kb.complete(card, f"r{card}")
    assert [c for c, _, _ in outbox(db)] == [child, grandchild, stranger]


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_each_event_kind_is_told_apart(
        db: Database, kb: Kanban, clock: FakeClock, tmp_path: Path) -> None:
    subscribe(db, clock, tmp_path, f"file:{tmp_path / 'n.log'}")
    blocked = kb.add_card(NewCard(title="blocked")).id
    kb.block(blocked, "need a person")
    asking = kb.add_card(NewCard(title="asking")).id
    claim = claim_one(kb, asking)
    with db.write() as conn:
        approvals.request(conn, asking, "rm -rf build", "rm", run_id=claim.run_id,
                          actor=worker(claim), now=clock())
    gated = kb.add_card(NewCard(title="gated", review="human")).id
    kb.complete(gated, "please look", actor=worker(claim_one(kb, gated)), gated=True)
    failed = kb.add_card(NewCard(title="failed")).id
    dependent = kb.add_card(NewCard(title="dependent", depends_on=(failed,))).id
    claim_one(kb, failed)
    fail(kb, failed)  # its dependent is blocked by a reaction, not by `move`
    cancelled = kb.add_card(NewCard(title="cancelled")).id
    kb.cancel(cancelled)
    assert [(c, e) for c, e, _ in outbox(db)] == [
        (blocked, "blocked"), (asking, "approval"), (gated, "review"), (failed, "failed"),
        (dependent, "blocked"), (cancelled, "cancelled")]


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_webhook_gets_a_signed_body_with_a_stable_delivery_id_across_retries(
        db: Database, kb: Kanban, clock: FakeClock, hook: WebhookReceiver,
        tmp_path: Path) -> None:
    hook.statuses = [500]
    subscribe(db, clock, tmp_path, f"webhook:{hook.url}", events=("done",))
    card = kb.add_card(NewCard(title="ship it")).id
    kb.complete(card, "shipped")
    sender = courier(db, clock, tmp_path)
    [first] = sender.deliver_due()
    assert first.status is DeliveryStatus.PENDING and first.error.startswith("HTTP 500")
    assert sender.deliver_due() == []  # backing off
    clock.advance(11)
    [second] = sender.deliver_due()
    assert second.status is DeliveryStatus.DELIVERED and second.attempt == 2
    assert all(r.signed for r in hook.requests) and len(hook.requests) == 2
    ids = {r.headers["x-kanban-delivery"] for r in hook.requests}
    assert len(ids) == 1 and ids == {hook.accepted[0].json["delivery_id"]}
    body = hook.accepted[0].json
    assert (body["event"], body["card_id"], body["text"]) == ("done", card, "shipped")
    assert hook.requests[0].headers["user-agent"] == "kanban-notify"
    assert outbox(db) == [(card, "done", "delivered")]


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_target_that_keeps_failing_is_listed_kept_and_redelivered(
        db: Database, kb: Kanban, clock: FakeClock, hook: WebhookReceiver,
        tmp_path: Path) -> None:
    hook.default = 503
    subscribe(db, clock, tmp_path, f"webhook:{hook.url}", events=("done",))
    card = kb.add_card(NewCard(title="t")).id
    kb.complete(card, "r")
    sender = courier(db, clock, tmp_path)
    for _ in range(SETTINGS.max_attempts):
        sender.deliver_due()
        clock.advance(120)
    assert outbox(db) == [(card, "done", "failed")]
    [failing] = notes(db, clock, tmp_path).failing()
    assert failing.target == f"webhook:{hook.url}" and failing.failed == 1
    assert failing.last_error is not None and "503" in failing.last_error
    with db.read() as conn:  # the board's header names it
        assert board_snapshot(conn, "default", now=clock()).failing == {
            f"webhook:{hook.url}": 1}
    [line, why] = notification_lines([failing])
    assert f"webhook:{hook.url}" in line and "1 failed" in line and "503" in why
    hook.default = 200
    assert notes(db, clock, tmp_path).redeliver() == 1
    [again] = sender.deliver_due()
    assert again.status is DeliveryStatus.DELIVERED
    assert notes(db, clock, tmp_path).failing() == []


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_slow_webhook_does_not_hold_up_the_other_targets(
        db: Database, kb: Kanban, clock: FakeClock, tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    with WebhookReceiver(secret=SECRET, hold=True, hold_timeout=30) as slow:
        subscribe(db, clock, tmp_path, f"webhook:{slow.url}", events=("done",))
        subscribe(db, clock, tmp_path, f"file:{log}", events=("done",))
        for n in range(3):
            kb.complete(kb.add_card(NewCard(title=f"c{n}")).id, f"r{n}")
        sender = courier(db, clock, tmp_path)
        passed: list[int] = []
        thread = threading.Thread(target=lambda: passed.append(len(sender.deliver_due())))
        thread.start()
        slow.wait_for(1, timeout=10)  # the webhook's lane is stuck in its first POST
        wait_until(lambda: log.exists() and log.read_text().count("## ") == 3, timeout=10,
                   what="the file target's three entries while the webhook hangs")
        assert slow.holding and slow.requests == []
        slow.release()
        thread.join(30)
    assert passed == [6]


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_removed_subscription_still_delivers_what_it_queued(
        db: Database, kb: Kanban, clock: FakeClock, tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    sub = subscribe(db, clock, tmp_path, f"file:{log}", events=("done",))
    kb.complete(kb.add_card(NewCard(title="before")).id, "kept")
    notes(db, clock, tmp_path).remove(sub)
    kb.complete(kb.add_card(NewCard(title="after")).id, "not subscribed")
    [sent] = courier(db, clock, tmp_path).deliver_due()
    assert sent.status is DeliveryStatus.DELIVERED
    assert "kept" in log.read_text() and "not subscribed" not in log.read_text()


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_board_comment_target_and_a_command_target(
        db: Database, kb: Kanban, clock: FakeClock, tmp_path: Path) -> None:
    card = kb.add_card(NewCard(title="doomed")).id
    inbox = kb.add_card(NewCard(title="inbox")).id
    subscribe(db, clock, tmp_path, f"board:{inbox}", events=("failed",))
    got = tmp_path / "got.json"
    subscribe(db, clock, tmp_path, f"cmd:sh -c 'cat > {got}; echo $KANBAN_NOTIFY_EVENT >> {got}'",
              events=("failed",))
    claim_one(kb, card)
    fail(kb, card, error="401 unauthorised")
    sent = courier(db, clock, tmp_path).deliver_due()
    assert {a.status for a in sent} == {DeliveryStatus.DELIVERED}
    [comment] = kb.detail(inbox).comments
    assert f"card #{card} failed" in comment.body and "401 unauthorised" in comment.body
    body, event = got.read_text().rsplit("\n", 2)[:2]
    assert json.loads(body)["text"] == "401 unauthorised"
    assert event == "failed"


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_adding_checks_scope_events_and_target(
        db: Database, kb: Kanban, clock: FakeClock, tmp_path: Path) -> None:
    service = notes(db, clock, tmp_path)
    with pytest.raises(CardNotFound):
        service.add(SubscriptionSpec(("done",), "card", "999", f"file:{tmp_path / 'x'}"))
    with pytest.raises(ValidationError, match="webhook needs an http"):
        service.add(SubscriptionSpec(("done",), "board", "", "webhook:file:///etc/passwd"))
    with pytest.raises(ConfigError, match="unknown profile"):
        service.add(SubscriptionSpec(("done",), "profile", "nobody", f"file:{tmp_path / 'x'}"))
    unsigned = Notifications(db, "default", config=Config(), env={}, home=tmp_path, clock=clock)
    with pytest.raises(ConfigError, match="webhooks are signed"):
        unsigned.add(SubscriptionSpec(("done",), "board", "", "webhook:http://127.0.0.1:9/"))
    assert service.listing() == []


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_beside_a_dispatcher_a_hung_webhook_holds_only_its_own_lane(
        db: Database, kb: Kanban, clock: FakeClock, tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    settings = Delivery(webhook_secret=SECRET, poll_s=0.02, webhook_timeout_s=30.0)
    with WebhookReceiver(secret=SECRET, hold=True, hold_timeout=30) as slow:
        subscribe(db, clock, tmp_path, f"webhook:{slow.url}", events=("done",))
        subscribe(db, clock, tmp_path, f"file:{log}", events=("done",))
        thread = Courier(db, Context(settings, SECRET, tmp_path, dict(os.environ)),
                         [NotifyQueue()], clock=clock).start()
        try:
            kb.complete(kb.add_card(NewCard(title="first")).id, "one")
            slow.wait_for(1, timeout=10)  # its lane is stuck in that POST
            kb.complete(kb.add_card(NewCard(title="second")).id, "two")
            wait_until(lambda: log.exists() and log.read_text().count("## ") == 2, timeout=10,
                       what="the file target's entries while the webhook hangs")
            assert slow.holding and slow.requests == []
            slow.release()
            wait_until(lambda: [s for _, _, s in outbox(db)] == ["delivered"] * 4, timeout=10,
                       what="the webhook's two events once it answers")
        finally:
            slow.release()
            thread.stop()
    assert len(slow.accepted) == 2


class _Unreadable(NotifyQueue):
    """A queue whose reads fail while `failing` is set (a database gone away)."""

    failing: str | None = None

    def due(self, *args: object, **kwargs: object) -> list:  # type: ignore[override]
        if self.failing is not None:
            raise RuntimeError(self.failing)
        return super().due(*args, **kwargs)  # type: ignore[arg-type]


def test_a_failing_round_is_said_once_per_change_through_the_dispatchers_log(
        db: Database, clock: FakeClock, tmp_path: Path) -> None:
    queue = _Unreadable()
    said: list[str] = []
    heard = threading.Event()

    def say(error: str) -> None:
        said.append(error)
        heard.set()

    runner = Courier(db, Context(SETTINGS, SECRET, tmp_path, dict(os.environ)), [queue],
                     clock=clock, on_error=say)
    queue.failing = "cannot connect"
    runner.start()
    try:
        wait_until(heard.is_set, timeout=30, what="the first failure said")
        for _ in range(3):  # more rounds, the same failure: nothing more is said
            runner._wake.set()
            wait_until(lambda: not runner._wake.is_set(), timeout=30, what="another round")
        queue.failing = "too many connections"
        runner._wake.set()
        wait_until(lambda: len(said) >= 2, timeout=30, what="the new failure said")
        queue.failing = None
        runner._wake.set()
        wait_until(lambda: runner._said is None, timeout=30, what="a clean round")
        queue.failing = "cannot connect"
        runner._wake.set()
        wait_until(lambda: len(said) >= 3, timeout=30, what="the failure said again")
    finally:
        runner.stop()
    assert said[:3] == ["cannot connect", "too many connections", "cannot connect"]
