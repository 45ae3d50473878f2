"""Row 5: `kanban board` wall time on boards of growing size, against the import floor.

The floor is a bare interpreter importing the CLI's libraries
(`python -c "import sqlmodel, typer, rich"`): no command can start faster than that.
Boards are built directly with executemany through the library's tables: most cards
done, some ready, a few todo, blocked, failed and running (with their runs).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench.common import Sizes, bench_env, fill_cards, median, new_board, query
from bench.report import Goal, Row

FLOOR = [sys.executable, "-c", "import sqlmodel, typer, rich"]
_SCRIPT = Path(sys.executable).parent / "kanban"  # the console script a user runs
KANBAN = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kanban.cli.app"]
MIX = (("done", 70), ("ready", 15), ("todo", 5), ("blocked", 3), ("failed", 4),
       ("cancelled", 2), ("running", 1))


def status_of(i: int) -> str:
    slot = i % 100
    for status, share in MIX:
        if slot < share:
            return status
        slot -= share
    return "done"


def build(path: Path, cards: int) -> None:
    new_board(path)
    fill_cards(path, cards, status_of=status_of)
    conn_rows = query(path, "SELECT id FROM card WHERE status = 'running'")
    if conn_rows:
        import sqlite3

        conn = sqlite3.connect(path)
        with conn:
            conn.executemany(
                "UPDATE card SET claim_token = 'tok' || id, attempt = 1 WHERE id = ?", conn_rows)
            conn.executemany(
                "INSERT INTO run (card_id, attempt, claim_token, started_at, heartbeat_at, "
                "progress, input_tokens, output_tokens, cached_tokens) "
                "SELECT id, 1, 'tok' || id, created_at, created_at, 'working', 0, 0, 0 "
                "FROM card WHERE id = ?", conn_rows)
        conn.close()


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=bench_env(COLUMNS="120"),
                          timeout=120, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: "
                           f"{done.stderr.decode()[-500:]}")
    return elapsed


def run(sizes: Sizes, work: Path) -> list[Row]:
    work.mkdir(parents=True, exist_ok=True)
    paths = {}
    for cards in sizes.cli_cards:
        paths[cards] = work / f"board-{cards}" / "kanban.db"
        build(paths[cards], cards)
    floor: list[float] = []
    times: dict[int, list[float]] = {cards: [] for cards in sizes.cli_cards}
    if sizes.cli_repeats > 1:
        wall(FLOOR)  # the first start pays for cold disk caches; not counted
    for _ in range(sizes.cli_repeats):  # the floor before and after, against drift
        floor.append(wall(FLOOR))
        for cards, path in paths.items():
            times[cards].append(wall([*KANBAN, "--db", str(path), "board"]))
        floor.append(wall(FLOOR))
    base = median(floor)
    rows = []
    for n, (cards, samples) in enumerate(times.items(), start=1):
        goal = Goal("ratio", "<=", 1.5) if cards == 10_000 else None
        rows.append(Row(f"5.{n}", f"`kanban board` wall time, {cards:,} cards", "ms",
                        median(samples) * 1000, base * 1000,
                        "python -c 'import sqlmodel, typer, rich'", goal,
                        f"median of {len(samples)} runs each, floor median of {len(floor)}"
                        if n == 1 else ""))
    return rows
