"""A dispatcher's own counters: fed by its events whatever the log level, served over HTTP
on loopback, and gone with the server (the listener too)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kanban.cards import NewCard
from kanban.dispatcher import logs
from kanban.dispatcher.breaker import Breaker
from kanban.dispatcher.local import LocalWorkers
from kanban.dispatcher.metrics import serve_metrics
from kanban.service import Kanban


def fake_dispatcher(kb: Kanban) -> Any:
    """What the metrics read of a dispatcher: its workers, breaker, limit and database."""
    return SimpleNamespace(kb=kb, workers=LocalWorkers(), breaker=Breaker(), max_workers=3)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url, timeout=30).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_events_become_counters_even_when_the_log_is_quiet(kb: Kanban) -> None:
    kb.add_card(NewCard("waiting its turn"))
    logs.configure(level=0)  # --quiet: claimed and finished lines are not logged
    dispatcher = fake_dispatcher(kb)
    served = serve_metrics(dispatcher, 0)
    card = {"board": "default", "profile": "coder"}
    try:
        logs.event("claimed", kind="claimed", dispatch_s=0.02, **card)
        logs.event("claimed", kind="claimed", dispatch_s=0.2, **card)
        logs.event("done", kind="finished", status="done", outcome="completed",
                   duration_s=1.5, **card)
        logs.event("again", logging.WARNING, kind="finished", status="ready",
                   outcome="crashed", duration_s=0.5, **card)
        logs.event("back", kind="finished", status="ready", outcome="handed_back",
                   duration_s=0.1, **card)
        logs.event("no", logging.ERROR, kind="spawn_failed", card=1, error="x")
        dispatcher.breaker.trip("the disk is full")
        seen = scrape(served.url)
    finally:
        served.close()
        logs.configure(level=1)
    labels = tuple(sorted(card.items()))
    assert seen[("kanban_dispatcher_claims_total", labels)] == 2
    assert seen[("kanban_dispatcher_dispatch_latency_seconds_bucket", (("le", "0.025"),))] == 1
    assert seen[("kanban_dispatcher_dispatch_latency_seconds_count", ())] == 2
    for outcome in ("completed", "crashed", "handed_back"):
        with_outcome = tuple(sorted((*labels, ("outcome", outcome))))
        assert seen[("kanban_dispatcher_runs_finished_total", with_outcome)] == 1
    retried = tuple(sorted((*labels, ("outcome", "crashed"))))
    assert {k[1]: v for k, v in seen.items() if k[0] == "kanban_dispatcher_retries_total"} \
        == {retried: 1}  # a hand-back spends no attempt: not a retry
    assert seen[("kanban_dispatcher_run_duration_seconds_count",
                 (("outcome", "completed"),))] == 1
    assert seen[("kanban_dispatcher_spawn_failures_total", ())] == 1
    assert seen[("kanban_dispatcher_breaker_open", ())] == 1
    assert seen[("kanban_dispatcher_max_workers", ())] == 3
    assert seen[("kanban_cards", (("board", "default"), ("profile", "default"),
                                  ("status", "ready")))] == 1  # the board's, read at scrape


def test_closing_the_server_stops_listening_and_counting(kb: Kanban) -> None:
    served = serve_metrics(fake_dispatcher(kb), 0)
    url = served.url
    assert served.metrics.hear in logs.listeners
    served.close()
    assert served.metrics.hear not in logs.listeners
    try:
        httpx.get(url, timeout=5)
    except httpx.ConnectError:
        return
    raise AssertionError("the metrics server still answers after close")


def test_an_event_it_cannot_count_does_not_stop_the_dispatcher(kb: Kanban) -> None:
    served = serve_metrics(fake_dispatcher(kb), 0)
    try:
        logs.event("odd", kind="finished", status="done", outcome="completed",
                   duration_s="a while", board="default", profile="coder")
        seen = scrape(served.url)
    finally:
        served.close()
    assert seen[("kanban_dispatcher_run_duration_seconds_count",
                 (("outcome", "completed"),))] == 0  # no duration to observe
    assert seen[("kanban_dispatcher_runs_finished_total", (
        ("board", "default"), ("outcome", "completed"), ("profile", "coder")))] == 1
