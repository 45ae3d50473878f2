"""End to end through real processes: `kanban cron ...` and `kanban dispatch` as subprocesses,
workers running agents and scripts, results delivered to a file and to local webhooks."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.cron.jobs import JobSpec
from kanban.cron.service import CronJobs
from kanban.dispatcher.loop import Dispatcher, DispatchOptions
from kanban.dispatcher.service import build_dispatcher
from kanban.state.paths import DbLocation
from kanban.state.rows import with_times
from kanban.state.store import Database
from tests.acceptance.conftest import BoardFiles
from tests.support.procs import kanban, query, start_dispatcher, stop, wait_until
from tests.support.webhook import WebhookReceiver

DEADLINE_S = 15.0
WAIT_S = 30.0
SECRET = "e2e-secret"


def cron_cards(db: Database) -> list[dict[str, object]]:
    with db.read() as conn:
        rows = conn.maps("SELECT * FROM card WHERE created_by = 'cron:hello' ORDER BY id")
        return [with_times(r) for r in rows]


def test_a_dispatcher_fires_a_job_and_a_worker_completes_its_card(
    board: BoardFiles, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):  # workers use `scripted:demo`
        monkeypatch.delenv(name, raising=False)
    db = board.kb.db
    CronJobs(db).add(JobSpec("hello", "every 1s", goal="Say hello to the board.",
                             title="Say hello"))
    dispatcher = build_dispatcher(board.kb, DbLocation(str(board.path), "flag"), DispatchOptions(
        tick_s=0.2, max_workers=2, drain_timeout_s=10.0))
    deadline = time.monotonic() + DEADLINE_S

    def finished() -> bool:
        done = any(card["status"] == "done" for card in cron_cards(db))
        return done or time.monotonic() > deadline

    dispatcher.run(until=finished)
    assert_card_done(db, dispatcher)


def assert_card_done(db: Database, dispatcher: Dispatcher) -> None:
    cards = cron_cards(db)
    done = [card for card in cards if card["status"] == "done"]
    assert done, f"no cron card was completed within {DEADLINE_S}s: {cards}"
    first = done[0]
    assert first["title"] == "Say hello" and first["goal"] == "Say hello to the board."
    assert first["result"], "the worker handed back no result"
    with db.read() as conn:
        kinds = conn.column("SELECT kind FROM event WHERE card_id = :id ORDER BY id",
                            {"id": first["id"]})
    assert kinds[0] == "created" and "cron_fired" in kinds and kinds[-1] == "complete"
    log = dispatcher.home / "logs" / f"{first['id']}-1.log"
    assert "scripted:demo" in log.read_text()


# -- kinds and delivery, all through subprocesses ---------------------------------------------


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET) as receiver:
        yield receiver


@pytest.fixture
def dispatch_env() -> dict[str, str]:
    dropped = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "KANBAN_WEBHOOK_SECRET", "http_proxy",
               "HTTP_PROXY")  # the receivers are local
    return {k: v for k, v in os.environ.items() if k not in dropped}


def configure(board: BoardFiles, **delivery: object) -> None:
    settings = {"webhook_secret": SECRET, "retry_base_s": 0.2, "retry_cap_s": 1.0,
                "poll_s": 0.05, **delivery}
    lines = [f"{key} = {json.dumps(value)}" for key, value in settings.items()
             if value is not None]
    board.configure("[delivery]\n" + "\n".join(lines) + "\n")


def fires(db: Path, job: str) -> list[tuple]:
    """(card id, manual, card status, card result) of each of the job's fires, oldest first."""
    return query(db, "SELECT f.card_id, f.manual, c.status, c.result FROM cron_fire f "
                     "JOIN card c ON c.id = f.card_id WHERE f.job = ? ORDER BY f.id", job)


def delivered(db: Path, card_id: int) -> list[str]:
    return [t for (t,) in query(db, "SELECT target FROM cron_delivery WHERE card_id = ? AND "
                                    "status = 'delivered' ORDER BY id", card_id)]


def test_a_script_job_delivers_on_schedule_and_on_run_and_feeds_a_chained_agent(
        board: BoardFiles, hook: WebhookReceiver, dispatch_env: dict[str, str],
        tmp_path: Path) -> None:
    configure(board)
    results = tmp_path / "results.md"
    digest_model = board.script("digest", [
        {"tool_calls": [{"name": "kanban_show", "arguments": {}}]},
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "digested"}}]},
    ])
    kanban(board.path, "cron", "add", "fetch", "-s", "every 2s",
           "--script", "echo \"fetched by card $KANBAN_CARD\"; echo noise >&2",
           "--deliver", f"file:{results}", "--deliver", f"webhook:{hook.url}",
           env=dispatch_env)
    kanban(board.path, "cron", "add", "digest", "-s", "@yearly", "--goal", "Summarise.",
           "--context-from", "fetch", "--model", digest_model, env=dispatch_env)
    log = tmp_path / "dispatch.log"
    proc = start_dispatcher(board.path, "--max-workers", "2", env=dispatch_env, log=log)
    try:
        # on schedule: a scripted card, run by a worker, its stdout delivered to both targets
        scheduled = wait_until(
            lambda: [f for f in fires(board.path, "fetch")
                     if not f[1] and len(delivered(board.path, f[0])) == 2],
            timeout=WAIT_S, what="a scheduled fetch delivered to the file and the webhook")[0]
        card_id = scheduled[0]
        assert scheduled[2:] == ("done", f"fetched by card {card_id}")
        # on `cron run`, exactly once more
        ran = json.loads(kanban(board.path, "cron", "run", "fetch", "--json",
                                env=dispatch_env).stdout)
        wait_until(lambda: len(delivered(board.path, ran["card_id"])) == 2, timeout=WAIT_S,
                   what="the manual fetch delivered")
        # a chained agent job sees the latest fetch result in its card's context
        chained = json.loads(kanban(board.path, "cron", "run", "digest", "--json",
                                    env=dispatch_env).stdout)
        wait_until(lambda: query(board.path, "SELECT status FROM card WHERE id = ?",
                                 chained["card_id"]) == [("done",)],
                   timeout=WAIT_S, what="the digest card done")
    finally:
        assert stop(proc) == 0, log.read_text()

    text = results.read_text()
    for card in (card_id, ran["card_id"]):
        assert f"cron job fetch · card #{card} done\nfetched by card {card}\n" in text
        assert "noise" not in text  # stderr is not the result
    bodies = {r.json["card_id"]: r for r in hook.accepted}
    assert {card_id, ran["card_id"]} <= set(bodies)
    assert all(r.signed for r in hook.requests), "a webhook body did not match its signature"
    assert bodies[ran["card_id"]].json["result"] == f"fetched by card {ran['card_id']}"
    assert len(hook.accepted) == len({r.json["delivery_id"] for r in hook.accepted})

    [(context,)] = query(board.path, "SELECT context FROM card WHERE id = ?",
                         chained["card_id"])
    [(latest,)] = query(board.path, "SELECT max(c.id) FROM card c JOIN cron_fire f ON "
                                    "f.card_id = c.id WHERE f.job = 'fetch' AND c.status = "
                                    "'done' AND c.finished_at <= (SELECT created_at FROM card "
                                    "WHERE id = ?)", chained["card_id"])
    assert f"## cron job fetch: latest result (card #{latest}, finished " in context
    assert f"fetched by card {latest}" in context
    transcript = json.loads(kanban(board.path, "log", str(chained["card_id"]), "--json",
                                   env=dispatch_env).stdout)
    prompts = [m["content"] for run in transcript["runs"] for m in run["messages"]
               if m["role"] == "user"]
    assert any(f"fetched by card {latest}" in p for p in prompts), prompts


def test_a_receiver_failing_twice_gets_the_result_once_with_three_attempts_recorded(
        board: BoardFiles, hook: WebhookReceiver, dispatch_env: dict[str, str],
        tmp_path: Path) -> None:
    configure(board, webhook_secret=None)
    dispatch_env["KANBAN_WEBHOOK_SECRET"] = SECRET  # the secret from the environment instead
    hook.statuses = [500, 500]
    kanban(board.path, "cron", "add", "report", "-s", "@yearly", "--script", "echo quarterly",
           "--deliver", f"webhook:{hook.url}", env=dispatch_env)
    log = tmp_path / "dispatch.log"
    proc = start_dispatcher(board.path, env=dispatch_env, log=log)
    try:
        card_id = json.loads(kanban(board.path, "cron", "run", "report", "--json",
                                    env=dispatch_env).stdout)["card_id"]
        wait_until(lambda: delivered(board.path, card_id), timeout=WAIT_S,
                   what="the report delivered")
    finally:
        assert stop(proc) == 0, log.read_text()
    # one more pass of every due delivery: nothing is sent again
    ticked = json.loads(kanban(board.path, "cron", "tick", "--json", env=dispatch_env).stdout)
    assert ticked["deliveries"] == []
    assert [r.status for r in hook.requests] == [500, 500, 200]
    assert len(hook.accepted) == 1 and hook.accepted[0].json["result"] == "quarterly"
    assert all(r.signed for r in hook.requests)
    assert query(board.path, "SELECT status, attempts FROM cron_delivery") == [("delivered", 3)]
    attempts = [json.loads(d) for (d,) in query(
        board.path, "SELECT data FROM event WHERE kind = 'delivery_attempt' AND card_id = ? "
                    "ORDER BY id", card_id)]
    assert [(a["attempt"], a["status"]) for a in attempts] == [
        (1, "pending"), (2, "pending"), (3, "delivered")]
    assert attempts[0]["error"].startswith("HTTP 500")
    history = json.loads(kanban(board.path, "cron", "history", "report", "--json",
                                env=dispatch_env).stdout)
    [delivery] = history["fires"][0]["deliveries"]
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 3)


def test_a_delivery_that_hangs_does_not_hold_up_the_dispatcher(
        board: BoardFiles, dispatch_env: dict[str, str], tmp_path: Path) -> None:
    configure(board, webhook_timeout_s=WAIT_S)
    with WebhookReceiver(secret=SECRET, hold=True, hold_timeout=WAIT_S) as slow:
        kanban(board.path, "cron", "add", "slow", "-s", "@yearly", "--script", "echo x",
               "--deliver", f"webhook:{slow.url}", env=dispatch_env)
        log = tmp_path / "dispatch.log"
        proc = start_dispatcher(board.path, env=dispatch_env, log=log)
        try:
            kanban(board.path, "cron", "run", "slow", env=dispatch_env)
            slow.wait_for(1, timeout=WAIT_S)  # the courier is now stuck in that POST
            card = kanban(board.path, "add", "meanwhile", "--goal", "carry on",
                          env=dispatch_env).stdout.strip().lstrip("#")
            wait_until(lambda: query(board.path, "SELECT status FROM card WHERE id = ?",
                                     int(card)) == [("done",)],
                       timeout=WAIT_S, what="a card claimed and done while a delivery hangs")
            assert slow.holding and slow.requests == []  # still no answer
            slow.release()
            wait_until(lambda: query(board.path, "SELECT status FROM cron_delivery")
                       == [("delivered",)], timeout=WAIT_S, what="the slow delivery")
        finally:
            slow.release()
            assert stop(proc) == 0, log.read_text()


def test_a_pending_delivery_survives_a_dispatcher_restart(
        board: BoardFiles, hook: WebhookReceiver, dispatch_env: dict[str, str],
        tmp_path: Path) -> None:
    configure(board, retry_base_s=0.2, retry_cap_s=0.5)
    hook.default = 503  # down until the test says otherwise
    kanban(board.path, "cron", "add", "report", "-s", "@yearly", "--script", "echo kept",
           "--deliver", f"webhook:{hook.url}", env=dispatch_env)
    log = tmp_path / "dispatch.log"
    first = start_dispatcher(board.path, env=dispatch_env, log=log)
    try:
        kanban(board.path, "cron", "run", "report", env=dispatch_env)
        hook.wait_for(2, timeout=WAIT_S)  # tried and retried while the receiver was down
    finally:
        assert stop(first) == 0, log.read_text()
    [(status, tried)] = query(board.path, "SELECT status, attempts FROM cron_delivery")
    assert status == "pending" and tried >= 2
    hook.default = 200
    second = start_dispatcher(board.path, env=dispatch_env, log=log)
    try:
        wait_until(lambda: query(board.path, "SELECT status FROM cron_delivery")
                   == [("delivered",)], timeout=WAIT_S, what="delivery after the restart")
    finally:
        assert stop(second) == 0, log.read_text()
    assert len(hook.accepted) == 1 and hook.accepted[0].json["result"] == "kept"
    [(attempts,)] = query(board.path, "SELECT attempts FROM cron_delivery")
    assert attempts == len(hook.requests)  # every attempt reached the receiver and was counted
