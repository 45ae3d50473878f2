"""/metrics of a real dispatcher and of `kanban web` after 200 cards: parsed with
prometheus_client's own parser, every counter agrees with what the board stored."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.acceptance.conftest import BoardFiles
from tests.support.procs import counts, query, start_dispatcher, stop, wait_until
from tests.support.web import TOKEN, start_web

CARDS = 200
METRICS_URL = re.compile(r"metrics on (http://\S+/metrics)")

Samples = dict[str, float]  # 'name{label="value",...}' (labels sorted) -> value


def parse(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            found[f"{s.name}{{{labels}}}"] = s.value
    return found


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for key, v in samples.items()
               if key.split("{", 1)[0] == name and all(w in key for w in want))


def metrics_url(log: Path) -> str:
    def said() -> str | None:
        found = METRICS_URL.search(log.read_text(errors="replace")) if log.exists() else None
        return found.group(1) if found else None

    return wait_until(said, timeout=60, what="the dispatcher's metrics address")


def scrape(url: str, **kwargs: object) -> Samples:
    response = httpx.get(url, timeout=30, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def test_after_200_cards_the_dispatcher_and_the_web_board_count_what_the_board_holds(
        board: BoardFiles, tmp_path: Path) -> None:
    for i in range(CARDS):
        board.add(f"card {i}", goal=f"step {i}")
    log = tmp_path / "dispatcher.log"
    dispatcher = start_dispatcher(board.path, "--max-workers", "4", "--metrics-port", "0",
                                  log=log)
    try:
        url = metrics_url(log)
        assert url.startswith("http://127.0.0.1:")
        wait_until(lambda: counts(board.path) == {"done": CARDS}, timeout=240,
                   what="200 cards done")
        # a card is done before its worker is reaped: the last exits are counted just after
        seen = wait_until(lambda: _all_reaped(url), timeout=60, what="every worker reaped")
    finally:
        assert stop(dispatcher) == 0
    runs, completed = query(board.path, "SELECT count(*), sum(outcome = 'completed') FROM run")[0]
    assert (runs, completed) == (CARDS, CARDS)
    assert total(seen, "kanban_cards", status="done") == CARDS
    assert total(seen, "kanban_cards") == CARDS  # every other state reads 0
    assert total(seen, "kanban_dispatcher_claims_total", board="default") == runs
    assert total(seen, "kanban_dispatcher_runs_finished_total", outcome="completed") == completed
    assert total(seen, "kanban_dispatcher_retries_total") == 0
    assert total(seen, "kanban_dispatcher_dispatch_latency_seconds_count") == runs
    assert total(seen, "kanban_dispatcher_run_duration_seconds_count",
                 outcome="completed") == completed
    assert total(seen, "kanban_dispatcher_workers_running") == 0
    assert total(seen, "kanban_dispatcher_breaker_open") == 0
    _spend_matches(board.path, seen)

    web = start_web(board.path)
    try:
        refused = httpx.get(f"{web.base}/metrics", timeout=30)
        assert refused.status_code == 401 and "kanban_cards" not in refused.text
        served = scrape(f"{web.base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    finally:
        web.stop()
    assert total(served, "kanban_cards", status="done") == CARDS
    _spend_matches(board.path, served)


def _all_reaped(url: str) -> Samples | None:
    samples = scrape(url)
    finished = total(samples, "kanban_dispatcher_runs_finished_total")
    return samples if finished == CARDS else None


def _spend_matches(db: Path, samples: Samples) -> None:
    calls, tokens_in, tokens_out, cached = query(
        db, "SELECT count(*), sum(input_tokens), sum(output_tokens), sum(cached_tokens) "
            "FROM usage")[0]
    assert calls >= CARDS and tokens_in > 0  # the scripted model reports its tokens
    assert total(samples, "kanban_model_calls_total", profile="default") == calls
    assert total(samples, "kanban_model_tokens_total", kind="input") == tokens_in
    assert total(samples, "kanban_model_tokens_total", kind="output") == tokens_out
    assert total(samples, "kanban_model_tokens_total", kind="cached") == cached
