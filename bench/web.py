"""Row 10: `kanban web` on a big board: first page, SSE fan-out, commit to browser.

- 10.1/10.2: server time (the app's Server-Timing header) of the board page and of
  /api/board on a 10,000-card board, against building every card of the board as JSON
  (what a board endpoint without pagination does), measured in the same run.
- 10.3: database queries per change with 100 viewers against 1 viewer (the hub reads once
  per change and sends the same bytes to everyone: the ratio must be 1).
- 10.4: commit to the last of 100 viewers having the card, against 1 viewer.
- 10.5: a card's add (its commit included) to the card in a real Chromium's DOM (Debian's
  chromium via Playwright), against a plain SSE client receiving the same push. Left out
  when no chromium exists.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.cli import build
from bench.common import Sizes, bench_env, kanban_at, median, percentile
from bench.report import Goal, Row

TOKEN = "bench-token-0123456789abcdef"
WAIT_S = 60.0  # a bound on waiting for a state


@dataclass(frozen=True)
class WebSizes:
    cards: int
    page_requests: int
    viewers: int
    commits: int
    browser_samples: int


SIZES = {
    "full": WebSizes(cards=10_000, page_requests=30, viewers=100, commits=30,
                     browser_samples=30),
    "quick": WebSizes(cards=10_000, page_requests=10, viewers=100, commits=10,
                      browser_samples=10),
    "smoke": WebSizes(cards=300, page_requests=2, viewers=5, commits=2, browser_samples=2),
}


@contextmanager
def serving(path: Path) -> Any:
    """`kanban web` on the board as a subprocess; yields its base URL."""
    command = [sys.executable, "-m", "kanban.cli.app", "--db", str(path), "web", "--port", "0",
               "--token", TOKEN]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=bench_env(), text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"kanban web did not start (exit {proc.wait(30)})")
        yield url.split("?", 1)[0].rstrip("/")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def server_ms(client: httpx.Client, path: str) -> float:
    response = client.get(path)
    response.raise_for_status()
    return float(response.headers["server-timing"].split("dur=")[1])


def all_cards_ms(path: Path, repeats: int) -> tuple[float, int]:
    """The baseline: every card of the board as JSON, straight from the library."""
    times, size = [], 0
    with kanban_at(path) as kb:
        for _ in range(repeats):
            start = time.perf_counter()
            body = json.dumps({"cards": [c.to_json() for c in kb.list_cards(board="default")]})
            times.append((time.perf_counter() - start) * 1000)
            size = len(body)
    return median(times), size


def first_page_rows(base: str, path: Path, n: WebSizes) -> list[Row]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base, headers=headers, timeout=WAIT_S) as client:
        server_ms(client, "/")  # warm: templates compiled, connections opened
        html = [server_ms(client, "/") for _ in range(n.page_requests)]
        api = [server_ms(client, "/api/board") for _ in range(n.page_requests)]
        page_bytes = len(client.get("/").content)
    baseline, all_bytes = all_cards_ms(path, max(3, n.page_requests // 5))
    label = f"every card as JSON, {n.cards:,} cards"
    return [
        Row("10.1", f"web board page server time, {n.cards:,} cards", "ms", median(html),
            baseline, label, Goal("value", "<=", 200, "ms"),
            f"median of {len(html)} requests (Server-Timing); the page is {page_bytes:,} "
            f"bytes (column heads, counts, 20 cards a column); all cards as JSON are "
            f"{all_bytes:,} bytes"),
        Row("10.2", f"/api/board server time, {n.cards:,} cards", "ms", median(api), baseline,
            label, Goal("value", "<=", 200, "ms")),
    ]


async def fan_out(base: str, path: Path, viewers: int, commits: int
                  ) -> tuple[list[float], float]:
    """Commit `commits` cards; per commit, ms until the last viewer has it; and the
    server's database queries per change."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=viewers + 10)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=WAIT_S,
                                 limits=limits) as client:
        cursor = (await client.get("/api/board")).json()["cursor"]
        seen: list[dict[int, float]] = [{} for _ in range(viewers)]
        ready = asyncio.Event()
        connected = [0]

        async def viewer(i: int) -> None:
            async with client.stream("GET", "/events", params={"after": cursor}) as response:
                connected[0] += 1
                if connected[0] == viewers:
                    ready.set()
                async for line in response.aiter_lines():
                    if line.startswith("data: ") and '"cards"' in line:
                        at = time.perf_counter()
                        for card in json.loads(line[6:]).get("cards", []):
                            seen[i].setdefault(card["id"], at)

        tasks = [asyncio.create_task(viewer(i)) for i in range(viewers)]
        await asyncio.wait_for(ready.wait(), WAIT_S)
        await _until(client, lambda s: s["viewers"] >= viewers)
        before = (await client.get("/api/stats")).json()
        spans = []
        with kanban_at(path) as kb:
            from kanban.cards import NewCard

            def add(title: str) -> tuple[int, float]:
                card = kb.add_card(NewCard(title))
                return card.id, time.perf_counter()  # committed: taken in the adding thread

            for i in range(commits):
                # The loop serves the viewers while the thread commits: one may have the card
                # before the thread's clock is read (a span of 0, never below).
                card_id, committed = await asyncio.to_thread(add, f"fan-out {i}")
                await _wait(lambda c=card_id: all(c in s for s in seen))
                spans.append(max(0.0, max(s[card_id] for s in seen) - committed) * 1000)
        after = (await client.get("/api/stats")).json()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
    refreshes = max(1, after["refreshes"] - before["refreshes"])
    return spans, (after["queries"] - before["queries"]) / refreshes


async def _wait(predicate: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("viewers never saw the card")
        await asyncio.sleep(0.001)


async def _until(client: httpx.AsyncClient, want: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not want((await client.get("/api/stats")).json()):
        if time.monotonic() > deadline:
            raise TimeoutError("viewers never connected")
        await asyncio.sleep(0.01)


def fan_out_rows(base: str, path: Path, n: WebSizes) -> list[Row]:
    one, one_q = asyncio.run(fan_out(base, path, 1, n.commits))
    many, many_q = asyncio.run(fan_out(base, path, n.viewers, n.commits))
    return [
        Row("10.3", f"database queries per change, {n.viewers} viewers", "", many_q, one_q,
            "1 viewer", Goal("ratio", "<=", 1.0),
            "queries the server ran per change read (its /api/stats counters)"),
        Row("10.4", f"fan-out p50: commit → last of {n.viewers} viewers has it", "ms",
            percentile(many, 50), percentile(one, 50), "1 viewer", Goal("value", "<=", 500, "ms"),
            f"{n.commits} commits; p99 {percentile(many, 99):.1f} ms with {n.viewers} "
            "viewers, all SSE clients in one process on the same cores"),
    ]


def browser_rows(base: str, path: Path, n: WebSizes) -> list[Row]:
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return []
    if chromium is None:
        return []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page()
            page.goto(f"{base}/?token={TOKEN}")
            page.wait_for_selector("#live.on", timeout=WAIT_S * 1000)
            page.evaluate("""() => { window.seenAt = {};
                new MutationObserver(() => { for (const li of
                  document.querySelectorAll('section[data-status=ready] li.card')) {
                    window.seenAt[li.dataset.id] ??= Date.now(); } })
                .observe(document.getElementById('columns'), {childList: true, subtree: true});
            }""")
            latencies = []
            with kanban_at(path) as kb:
                from kanban.cards import NewCard

                for i in range(n.browser_samples):
                    # Timed from before the add: a time taken after it returns can be later
                    # than the browser's (a busy machine may not run this process first).
                    adding = time.time() * 1000
                    card = kb.add_card(NewCard(f"to the browser {i}", priority=10**6 - i))
                    latencies.append(_seen_at(page, card.id) - adding)
        finally:
            browser.close()
    plain, _ = asyncio.run(fan_out(base, path, 1, n.browser_samples))
    return [Row("10.5", "add → card in Chromium's DOM, p50", "ms", percentile(latencies, 50),
                percentile(plain, 50), "plain SSE client", Goal("value", "<=", 500, "ms"),
                f"{n.browser_samples} cards; p99 {percentile(latencies, 99):.1f} ms; headless "
                "Debian chromium, wall clocks of the same machine")]


def _seen_at(page: Any, card_id: int) -> float:
    """When the page's observer saw the card (polled: the board's CSP forbids the eval
    that wait_for_function needs, and the time is taken in the page anyway)."""
    deadline = time.monotonic() + WAIT_S
    while (at := page.evaluate(f"window.seenAt[{card_id}]")) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"card {card_id} never reached the browser")
        time.sleep(0.002)
    return float(at)


def run(sizes: Sizes, work: Path) -> list[Row]:
    n = SIZES.get(sizes.name, SIZES["quick"])
    work.mkdir(parents=True, exist_ok=True)
    path = work / "board" / "kanban.db"
    build(path, n.cards)
    rows: list[Row] = []
    with serving(path) as base:
        rows += first_page_rows(base, path, n)
        rows += fan_out_rows(base, path, n)
        rows += browser_rows(base, path, n)
    if not any(r.key == "10.5" for r in rows):
        rows[-1] = Row(**{**rows[-1].__dict__, "note": rows[-1].note + "; 10.5 left out: no "
                          "chromium (or playwright) on this machine"})
    return rows
