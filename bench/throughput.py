"""Row 3: end-to-end throughput, cards added → all done, with the scripted demo model.

kanban: a `kanban dispatch --max-workers 8` process works N cards added in one
transaction. Baseline: the same worker code run in one process, card after card
(`Kanban.claim` then `worker.main.run_card`), with no dispatcher, fork or process
start: what the agent loop and its database writes cost by themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    bench_env,
    configure,
    kanban_at,
    new_board,
    wait_until,
    warm_up,
)
from bench.report import Row

REPO = Path(__file__).resolve().parent.parent


def add_cards(path: Path, n: int, first: int = 0) -> None:
    """n cards through the library's add, in one transaction."""
    from kanban import cards
    from kanban.cards import NewCard

    with kanban_at(path) as kb, kb.db.write() as conn:
        now = kb.clock()
        for i in range(first, first + n):
            cards.add_card(conn, NewCard(title=f"card {i}", goal=f"finish card {i}"), now)


def dispatched(work: Path, n: int, workers: int) -> float:
    """Cards per second through a warm dispatcher with `workers` workers."""
    path = work / "dispatched" / "kanban.db"
    new_board(path)
    configure(path)  # the default profile: the scripted demo model (no API key set)
    reader = Reader(path)
    try:
        with DispatcherProcess(path, max_workers=workers) as dispatcher:
            warm_up(path, dispatcher)
            start = time.time()
            add_cards(path, n)

            def all_done() -> bool:
                dispatcher.check_alive()
                return reader.one("SELECT count(*) FROM card WHERE status != 'done'") == 0

            wait_until(all_done, timeout=60 + n, what=f"{n} cards done", interval=0.05)
            elapsed = time.time() - start
            failed = reader.one("SELECT count(*) FROM run WHERE outcome != 'completed'")
            if failed:
                raise RuntimeError(f"{failed} runs did not complete; see {dispatcher.log}")
        return n / elapsed
    finally:
        reader.close()


def serial_in_process(path: str, n: int) -> float:
    """Claim and run each card's worker in this process, one after another; cards/s."""
    from kanban.service import Kanban
    from kanban.state import DbLocation, open_database
    from kanban.state.config_file import load_config
    from kanban.worker.main import WorkerEnv, run_card
    from kanban.worker.sandboxing import probe_host

    probe_host()  # once per process, as the forkserver does for its workers
    location = DbLocation(path, "flag")
    db = open_database(location)
    kb = Kanban(db)
    config = load_config(location.home / "config.toml")
    env = bench_env()
    start = time.perf_counter()
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        for _ in range(n):
            claim = kb.claim(1, lease_s=config.limits.lease_s)[0]
            wenv = WorkerEnv(path, claim.board, claim.card_id, claim.claim_token, claim.run_id,
                             config.limits.lease_s)
            code = run_card(kb, wenv, config, env)
            if code != 0:
                raise RuntimeError(f"card #{claim.card_id}: worker code {code}")
    rate = n / (time.perf_counter() - start)
    db.dispose()
    return rate


def serial(work: Path, n: int) -> float:
    path = work / "serial" / "kanban.db"
    new_board(path)
    configure(path)
    add_cards(path, n)
    code = ("from bench.throughput import serial_in_process; "
            f"print(serial_in_process({str(path)!r}, {n}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=bench_env(PYTHONPATH=str(REPO)), timeout=60 + n, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"serial baseline failed: {out.stderr[-800:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def run(sizes: Sizes, work: Path) -> list[Row]:
    rate = dispatched(work, sizes.e2e_cards, sizes.e2e_workers)
    baseline = serial(work, sizes.e2e_serial_cards)
    return [Row("3.1", f"end-to-end cards/s: {sizes.e2e_cards} demo cards, "
                f"{sizes.e2e_workers} warm workers", "/s", rate, baseline,
                f"in-process serial worker loop, {sizes.e2e_serial_cards} cards", None,
                "no goal set; the baseline is the same agent loop and writes with no "
                "dispatcher or processes, so the ratio is what 8 processes on "
                f"{os.cpu_count()} cores buy after process and dispatch costs")]
