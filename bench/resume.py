"""Row 11: durable delegation. A waiting orchestrator holds no worker; when its last child
finishes it goes back to ready in the same transaction, the dispatcher wakes, claims it and
a worker resumes its stored conversation. Measured from the database: the child's
completion event → the parent's resumed run's first transcript message (stored just before
its first model call). Beside it, in the same run, the child's own dispatch: its 'created'
event → its first model call.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    card_settled,
    complete_at_once,
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


def _delegate_once() -> list[dict[str, object]]:
    """An orchestrator: delegate one task, then (resumed) complete its card."""
    task = {"title": "child", "goal": "answer at once"}
    return [{"tool_calls": [{"name": "delegate", "arguments": {"tasks": [task]}}]},
            {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "merged"}}]},
            {"text": "done"}]


def _configure(path: Path) -> None:
    leaf = write_script(path.parent / "once.json", complete_at_once())
    orchestrator = write_script(path.parent / "orchestrate.json", _delegate_once())
    (path.parent / "config.toml").write_text(
        f"[limits]\nmax_depth = 2\n\n[profiles.default]\nmodel = {json.dumps(leaf)}\n\n"
        f"[profiles.orch]\nmodel = {json.dumps(orchestrator)}\nrole = \"orchestrator\"\n")


def measure(work: Path, parents: int) -> tuple[list[float], list[float]]:
    """Per parent: (child done → parent's resumed first model call, child created → its
    first model call), in milliseconds."""
    path = work / "kanban.db"
    new_board(path)
    _configure(path)
    reader = Reader(path)
    ids: list[int] = []
    try:
        with DispatcherProcess(path, max_workers=2) as dispatcher, kanban_at(path) as kb:
            warm_up(path, dispatcher)
            for i in range(parents):
                card_id = kb.add_card(NewCard(title=f"orchestrate {i}", goal="delegate",
                                              profile="orch")).id
                ids.append(card_id)

                def settled(card_id: int = card_id) -> bool:
                    dispatcher.check_alive()
                    return card_settled(reader, card_id)

                wait_until(settled, timeout=60, what=f"card #{card_id}")
        return _resumed_ms(reader, ids), _child_dispatch_ms(reader, ids)
    finally:
        reader.close()


def _resumed_ms(reader: Reader, ids: list[int]) -> list[float]:
    out = []
    for parent in ids:
        done = reader.one("SELECT e.at FROM event e JOIN card c ON c.id = e.card_id WHERE "
                          "c.parent_id = ? AND e.kind = 'complete'", parent)
        first = reader.one("SELECT m.at FROM run r JOIN message m ON m.run_id = r.id WHERE "
                           "r.card_id = ? AND m.seq = 1 ORDER BY r.id DESC LIMIT 1", parent)
        out.append((ts(first) - ts(done)) * 1000)
    return out


def _child_dispatch_ms(reader: Reader, ids: list[int]) -> list[float]:
    out = []
    for parent in ids:
        created, first = reader.all(
            "SELECT e.at, m.at FROM card c JOIN event e ON e.card_id = c.id AND "
            "e.kind = 'created' JOIN run r ON r.card_id = c.id JOIN message m ON "
            "m.run_id = r.id AND m.seq = 1 WHERE c.parent_id = ?", parent)[0]
        out.append((ts(first) - ts(created)) * 1000)
    return out


def run(sizes: Sizes, work: Path) -> list[Row]:
    resumed, fresh = measure(work, max(2, sizes.latency_warm // 4))
    sample = (f"{len(resumed)} orchestrators, each waiting on one child; baseline: those "
              "children's own created → first model call")
    return [
        Row("12.1", "resume latency p50: last child done → parent's first model call", "ms",
            percentile(resumed, 50), percentile(fresh, 50), "a new card's dispatch",
            Goal("value", "<=", 50, "ms"), sample),
        Row("12.2", "resume latency p99: last child done → parent's first model call", "ms",
            percentile(resumed, 99), percentile(fresh, 99), "a new card's dispatch", None),
    ]
