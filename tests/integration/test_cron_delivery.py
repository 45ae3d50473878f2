"""Delivering finished fires' results: every target kind, retries with backoff, exactly once."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.cron.courier import Courier
from kanban.cron.firing import fire_job_now
from kanban.cron.jobs import JobSpec
from kanban.cron.ledger import DeliveryStatus
from kanban.cron.service import CronJobs
from kanban.delivery.senders import Context
from kanban.service import Kanban
from kanban.state.config import Delivery
from kanban.state.store import Database
from tests.support.db import STORES, FakeClock, claim_one, events_of, fail
from tests.support.webhook import WebhookReceiver

SETTINGS = Delivery(retry_base_s=10.0, retry_cap_s=60.0, max_attempts=4, webhook_timeout_s=5.0,
                    command_timeout_s=10.0)


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret="s3cret") as receiver:
        yield receiver


def courier(db: Database, clock: FakeClock, home: Path, **settings: object) -> Courier:
    context = Context(replace(SETTINGS, **settings), "s3cret", home, dict(os.environ))
    return Courier(db, context, clock=clock)


def fired_card(db: Database, clock: FakeClock, *targets: str, name: str = "job") -> int:
    CronJobs(db, clock=clock).add(JobSpec(name, "@daily", goal="g", deliver=targets))
    card_id = fire_job_now(db, name, clock()).card_id
    assert card_id is not None
    return card_id


def attempts_of(db: Database, card_id: int) -> list[dict[str, object]]:
    return [e["data"] for e in events_of(db, card_id) if e["kind"] == "delivery_attempt"]


def delivery_rows(db: Database) -> list[tuple[object, ...]]:
    with db.read() as conn:
        return conn.all("SELECT status, attempts, last_error FROM cron_delivery ORDER BY id")


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_receiver_failing_twice_gets_the_result_once_after_three_attempts(
        db: Database, kb: Kanban, clock: FakeClock, hook: WebhookReceiver,
        tmp_path: Path) -> None:
    hook.statuses = [500, 503]
    card = fired_card(db, clock, f"webhook:{hook.url}")
    kb.complete(card, "the report")
    sender = courier(db, clock, tmp_path)
    [first] = sender.deliver_due()
    assert (first.attempt, first.status) == (1, DeliveryStatus.PENDING)
    assert first.error == "HTTP 500 Internal Server Error: receiver says no"
    assert sender.deliver_due() == []  # backing off
    clock.advance(10)  # the first backoff is 5-10s
    [second] = sender.deliver_due()
    assert (second.attempt, second.status) == (2, DeliveryStatus.PENDING)
    assert sender.deliver_due() == []
    clock.advance(20)  # the second is 10-20s
    [third] = sender.deliver_due()
    assert (third.attempt, third.status, third.error) == (3, DeliveryStatus.DELIVERED, None)
    clock.advance(3600)
    assert sender.deliver_due() == []
    assert len(hook.requests) == 3 and len(hook.accepted) == 1
    assert all(r.signed for r in hook.requests)
    assert len({r.body for r in hook.requests}) == 1  # the same signed body each time
    assert [r.headers["x-kanban-attempt"] for r in hook.requests] == ["1", "2", "3"]
    body = hook.accepted[0].json
    assert body == {**body, "job": "job", "card_id": card, "status": "done",
                    "result": "the report", "error": None, "board": "default"}
    assert hook.accepted[0].headers["x-kanban-delivery"] == str(body["delivery_id"])
    assert [a["status"] for a in attempts_of(db, card)] == ["pending", "pending", "delivered"]
    assert [a["attempt"] for a in attempts_of(db, card)] == [1, 2, 3]
    assert delivery_rows(db) == [("delivered", 3, None)]


def test_nothing_is_sent_before_the_card_finishes(db: Database, kb: Kanban, clock: FakeClock,
                                                  hook: WebhookReceiver, tmp_path: Path) -> None:
    card = fired_card(db, clock, f"webhook:{hook.url}")
    sender = courier(db, clock, tmp_path)
    claim_one(kb, card)
    assert sender.deliver_due() == []
    assert CronJobs(db, clock=clock).detail("job").undelivered[0].state == "waiting"
    fail(kb, card, error="model said no")
    [sent] = sender.deliver_due()
    assert sent.status is DeliveryStatus.DELIVERED
    body = hook.accepted[0].json
    assert (body["status"], body["result"], body["error"]) == ("failed", None, "model said no")


def test_spent_attempts_leave_a_failed_delivery_in_view_until_redelivered(
        db: Database, kb: Kanban, clock: FakeClock, hook: WebhookReceiver,
        tmp_path: Path) -> None:
    hook.default = 502
    card = fired_card(db, clock, f"webhook:{hook.url}")
    kb.complete(card, "r")
    sender = courier(db, clock, tmp_path)
    for _ in range(4):
        assert len(sender.deliver_due()) == 1
        clock.advance(120)
    assert sender.deliver_due() == []
    assert delivery_rows(db) == [("failed", 4, "HTTP 502 Bad Gateway: receiver says no")]
    jobs = CronJobs(db, clock=clock)
    [undelivered] = jobs.detail("job").undelivered
    assert (undelivered.state, undelivered.attempts) == ("failed", 4)
    hook.default = 200
    assert jobs.redeliver("job") == [undelivered.id]
    [sent] = sender.deliver_due()
    assert sent.status is DeliveryStatus.DELIVERED
    assert jobs.detail("job").undelivered == []
    assert len(hook.accepted) == 1


def test_an_unreachable_receiver_is_a_failed_attempt(db: Database, kb: Kanban,
                                                    clock: FakeClock, tmp_path: Path) -> None:
    with WebhookReceiver() as gone:
        url = gone.url
    card = fired_card(db, clock, f"webhook:{url}")
    kb.complete(card, "r")
    [attempt] = courier(db, clock, tmp_path).deliver_due()
    assert attempt.status is DeliveryStatus.PENDING
    assert attempt.error is not None and attempt.error.startswith(f"cannot reach {url}")


def test_a_file_gets_a_dated_entry_per_result(db: Database, kb: Kanban, clock: FakeClock,
                                              tmp_path: Path) -> None:
    target = tmp_path / "results.md"
    first = fired_card(db, clock, f"file:{target}")
    kb.complete(first, "line one\nline two\n")
    second = fire_job_now(db, "job", clock.advance(60)).card_id
    kb.complete(second, "again")  # type: ignore[arg-type]
    sent = courier(db, clock, tmp_path).deliver_due()
    assert [a.status for a in sent] == [DeliveryStatus.DELIVERED] * 2
    assert target.read_text() == (
        f"## 2025-01-01 12:00:00 UTC · cron job job · card #{first} done\nline one\nline two\n\n"
        f"## 2025-01-01 12:01:00 UTC · cron job job · card #{second} done\nagain\n\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_command_reads_the_result_on_stdin(db: Database, kb: Kanban, clock: FakeClock,
                                             tmp_path: Path) -> None:
    out = tmp_path / "mail.txt"
    card = fired_card(db, clock, f"cmd:cat > {out}; echo \"$KANBAN_CRON_JOB $KANBAN_STATUS\" "
                                 f">> {out}")
    kb.complete(card, "dear reader")
    [sent] = courier(db, clock, tmp_path).deliver_due()
    assert sent.status is DeliveryStatus.DELIVERED
    assert out.read_text() == "dear readerjob done\n"


def test_a_failing_command_is_retried_with_its_output(db: Database, kb: Kanban,
                                                      clock: FakeClock, tmp_path: Path) -> None:
    card = fired_card(db, clock, "cmd:echo no mailbox >&2; exit 3")
    kb.complete(card, "r")
    [attempt] = courier(db, clock, tmp_path).deliver_due()
    assert (attempt.status, attempt.error) == (DeliveryStatus.PENDING,
                                               "exited with code 3: no mailbox")


def test_a_board_target_gets_one_comment(db: Database, kb: Kanban, clock: FakeClock,
                                         tmp_path: Path) -> None:
    inbox = kb.add_card(NewCard("inbox")).id
    card = fired_card(db, clock, f"board:{inbox}")
    kb.complete(card, "summary for the team")
    sender = courier(db, clock, tmp_path)
    [sent] = sender.deliver_due()
    assert sent.status is DeliveryStatus.DELIVERED and sender.deliver_due() == []
    [comment] = kb.detail(inbox).comments
    assert comment.author == "cron:job"
    assert comment.body == (f"2025-01-01 12:00:00 UTC · cron job job · card #{card} done\n\n"
                            "summary for the team")


def test_a_delivery_left_sending_by_a_dead_process_is_taken_again(
        db: Database, kb: Kanban, clock: FakeClock, hook: WebhookReceiver,
        tmp_path: Path) -> None:
    from kanban.cron import ledger

    card = fired_card(db, clock, f"webhook:{hook.url}")
    kb.complete(card, "r")
    sender = courier(db, clock, tmp_path)
    with db.write() as conn:  # a process took it, then died before it could say how it went
        [(delivery_id, seen)] = ledger.due_deliveries(conn, clock(), limit=5)
        assert ledger.claim_delivery(conn, delivery_id, seen, now=clock(), lease_s=60)
    assert sender.deliver_due() == []  # its lease still holds
    clock.advance(61)
    [again] = sender.deliver_due()
    assert (again.attempt, again.status) == (2, DeliveryStatus.DELIVERED)
    assert len(hook.accepted) == 1


def test_racing_couriers_deliver_each_result_exactly_once(
        db: Database, kb: Kanban, clock: FakeClock, hook: WebhookReceiver,
        tmp_path: Path) -> None:
    jobs = CronJobs(db, clock=clock)
    jobs.add(JobSpec("job", "@daily", goal="g", deliver=(f"webhook:{hook.url}",),
                     overlap="allow"))
    cards = [fire_job_now(db, "job", clock()).card_id for _ in range(12)]
    for card in cards:
        kb.complete(card, f"result {card}")  # type: ignore[arg-type]
    barrier = threading.Barrier(4)
    results: list[int] = []

    def run() -> None:
        barrier.wait(timeout=10)
        results.append(len(courier(db, clock, tmp_path).deliver_due(limit=100)))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(results) == 12
    per_card = Counter(json.loads(r.body)["card_id"] for r in hook.requests)
    assert per_card == Counter(dict.fromkeys(cards, 1))
    assert {row[0] for row in delivery_rows(db)} == {"delivered"}
