"""Row 8: scheduled cards wake the dispatcher at their time (never before); search at scale.

8.1-8.2: a card scheduled a moment ahead meets an idle dispatcher; we record when it was
claimed (`run.started_at`) against its due time. The baseline is the same dispatcher
claiming a ready card (created → claimed), measured in turns with the scheduled ones.
8.3-8.4: `kanban search` at 100k cards (with comments and transcripts) against `kanban show`,
the CLI's start-up for a read command on the same database.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    bench_env,
    card_settled,
    complete_at_once,
    configure,
    kanban_at,
    new_board,
    percentile,
    ts,
    wait_until,
    warm_up,
    write_script,
)
from bench.report import Goal, Row
from kanban.cards import NewCard
from kanban.state.timeutil import utcnow

SCHEDULED_CARDS = {"full": 40, "quick": 12, "smoke": 2}
SEARCH_CARDS = {"full": 100_000, "quick": 100_000, "smoke": 200}
SEARCH_REPEATS = {"full": 7, "quick": 3, "smoke": 1}
AHEAD_S = (0.2, 0.6)  # how far ahead each card is scheduled (random within)


def scheduled(work: Path, cards: int) -> tuple[list[float], list[float]]:
    """(due → claimed per scheduled card, created → claimed per ready card), in ms."""
    path = work / "scheduled" / "kanban.db"
    new_board(path)
    configure(path, model=write_script(path.parent / "once.json", complete_at_once()))
    reader = Reader(path)
    rng = random.Random(7)
    late, ready = [], []
    try:
        with DispatcherProcess(path, max_workers=2) as dispatcher, kanban_at(path) as kb:
            warm_up(path, dispatcher)
            for i in range(cards):
                due = utcnow() + timedelta(seconds=rng.uniform(*AHEAD_S))
                late.append(_claimed_ms(reader, dispatcher, kb.add_card(
                    NewCard(f"scheduled {i}", run_at=due)).id) - due.timestamp() * 1000)
                card = kb.add_card(NewCard(f"ready {i}"))
                ready.append(_claimed_ms(reader, dispatcher, card.id)
                             - card.created_at.timestamp() * 1000)
    finally:
        reader.close()
    return late, ready


def _claimed_ms(reader: Reader, dispatcher: DispatcherProcess, card_id: int) -> float:
    def settled() -> bool:
        dispatcher.check_alive()
        return card_settled(reader, card_id)

    wait_until(settled, timeout=60, what=f"card #{card_id}")
    started = reader.one("SELECT started_at FROM run WHERE card_id = ? ORDER BY id LIMIT 1",
                         card_id)
    return ts(started) * 1000


def search_timings(work: Path, cards: int, repeats: int) -> dict[str, float]:
    """Median ms of `kanban search` for a rare and a common word, and of `kanban show`, on a
    board of `cards` cards; and the rare word's hits."""
    path = work / "search" / "kanban.db"
    new_board(path)
    fill_searchable(path, cards)
    env = bench_env()
    cli = [sys.executable, "-m", "kanban.cli.app", "--db", str(path)]

    def timed(*args: str) -> tuple[float, str]:
        started = time.perf_counter()
        done = subprocess.run([*cli, *args], capture_output=True, text=True, env=env,
                              check=True)
        return (time.perf_counter() - started) * 1000, done.stdout

    timed("show", "1")  # page cache warm for both
    rare, common, show, hits = [], [], [], 0
    for _ in range(repeats):
        ms, out = timed("search", "zebra", "--json")
        rare.append(ms)
        hits = out.count('"card_id"')
        common.append(timed("search", "alpha", "--json")[0])
        show.append(timed("show", "1")[0])
    return {"rare": statistics.median(rare), "common": statistics.median(common),
            "show": statistics.median(show), "hits": hits}


WORDS = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra",
    "tango", "uniform", "victor", "whiskey", "xray", "yankee", "parser", "report", "deploy",
    "review", "invoice", "backup", "migrate", "schema", "latency", "cache",
)


def fill_searchable(path: Path, cards: int) -> None:
    """`cards` cards with text, a comment on every tenth and a two-message transcript on
    every twentieth; one card in a thousand mentions the rare word 'zebra'."""
    rng = random.Random(23)
    now = utcnow()

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    rows = [{
        "board": "default", "title": words(6) + (" zebra" if i % 1000 == 7 else ""),
        "goal": words(30), "context": "", "status": "done", "priority": 0, "profile": "default",
        "depth": 0, "created_by": "user", "attempt": 1, "max_attempts": 3, "retry_base": 0,
        "run_after": now, "created_at": now, "updated_at": now, "result": words(20),
        "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
    } for i in range(cards)]
    columns = list(rows[0])
    with kanban_at(path) as kb, kb.db.write() as conn:
        conn.many(f"INSERT INTO card ({', '.join(columns)}) "
                  f"VALUES ({', '.join(':' + c for c in columns)})", rows)
        conn.many("INSERT INTO comment (card_id, author, body, at) VALUES (?, 'user', ?, ?)",
                  [(i, words(15), now) for i in range(1, cards + 1, 10)])
        conn.many("INSERT INTO run (id, card_id, attempt, claim_token, started_at, "
                  "input_tokens, output_tokens, cached_tokens) VALUES (?, ?, 1, 't', ?, 0, 0, 0)",
                  [(i, i, now) for i in range(1, cards + 1, 20)])
        conn.many("INSERT INTO message (run_id, seq, role, content, at) VALUES (?, ?, ?, ?, ?)",
                  [(i, seq, role, words(80), now) for i in range(1, cards + 1, 20)
                   for seq, role in ((1, "user"), (2, "assistant"))])


def run(sizes: Sizes, work: Path) -> list[Row]:
    late, ready = scheduled(work, SCHEDULED_CARDS[sizes.name])
    search = search_timings(work, SEARCH_CARDS[sizes.name], SEARCH_REPEATS[sizes.name])
    cards = f"{SEARCH_CARDS[sizes.name]:,}"
    n = len(late)
    return [
        Row("8.1", "scheduled card: due → claimed, max", "ms", max(late), max(ready),
            "ready card: created → claimed, max", Goal("value", "<=", 100, "ms"),
            f"{n} cards scheduled 0.2-0.6 s ahead, each meeting an idle dispatcher; "
            f"p50 {percentile(late, 50):.1f} ms"),
        Row("8.2", "scheduled card: earliest claim relative to due", "ms", min(late), 0.0,
            "its due time", Goal("value", ">=", 0, "ms"),
            "negative would mean a card was claimed before its time"),
        Row("8.3", f"kanban search (rare word) at {cards} cards", "ms", search["rare"],
            search["show"], "kanban show 1 (read command start-up)", Goal("ratio", "<=", 1.5),
            f"{search['hits']:.0f} hits; titles, goals, context, results, comments (every "
            "10th card) and transcripts (every 20th) indexed; median wall time of the "
            "whole command"),
        Row("8.4", f"kanban search (word in 80% of cards) at {cards} cards", "ms",
            search["common"], search["show"], "kanban show 1", Goal("ratio", "<=", 1.5),
            "each source ranks its newest 2,000 matches"),
    ]
