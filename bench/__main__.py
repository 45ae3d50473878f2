"""`python -m bench [--quick | --smoke] [--only NAMES]`: run, print one table, write results.md."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import (
    agent,
    claims,
    cli,
    daily,
    fleet,
    idle,
    latency,
    memory,
    metrics,
    netproxy,
    pg_fleet,
    postgres,
    recovery,
    resume,
    scale,
    throughput,
    tools,
    web,
)
from bench.common import FULL, PROFILES, Sizes
from bench.report import Row, machine, render_notes, render_results, render_table

Benchmark = Callable[[Sizes, Path], list[Row]]
BENCHMARKS: dict[str, Benchmark] = {
    "claims": claims.run,
    "latency": latency.run,
    "throughput": throughput.run,
    "memory": memory.run,
    "cli": cli.run,
    "recovery": recovery.run,
    "agent": agent.run,
    "web": web.run,
    "daily": daily.run,
    "tools": tools.run,
    "netproxy": netproxy.run,  # a command's GET through a card's network-list proxy
    "scale": scale.run,  # a million cards against 10,000
    "resume": resume.run,  # a waiting orchestrator resumed after its last child
    "idle": idle.run,  # an idle dispatcher on 100,000 cards: its CPU, a writer's lock wait
    "fleet": fleet.run,  # hundreds of workers streaming at once on one host
    "postgres": postgres.run,  # beside procrastinate and pgqueuer; none without a server
    "pg_fleet": pg_fleet.run,  # server connections of 4 dispatchers' workers, pooled or not
    "metrics": metrics.run,  # a /metrics scrape at 100,000 cards against 1,000
}
RESULTS = Path(__file__).resolve().parent / "results.md"


def run_all(sizes: Sizes, work: Path, only: Sequence[str] = (),
            say: Callable[[str], None] = lambda line: None) -> list[Row]:
    """Every benchmark (or `only` those), in order; a failing one becomes a failed row."""
    rows: list[Row] = []
    for name, benchmark in BENCHMARKS.items():
        if only and name not in only:
            continue
        started = time.monotonic()
        try:
            rows += benchmark(sizes, work / name)
        except Exception as exc:
            traceback.print_exc()
            rows.append(Row(name, f"{name}: FAILED", "", None, None, "-",
                            note=f"{type(exc).__name__}: {exc}"))
        say(f"bench: {name} took {time.monotonic() - started:.1f} s")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_const", const="quick", dest="profile",
                      help="smaller samples, one repeat (about a minute and a half)")
    size.add_argument("--smoke", action="store_const", const="smoke", dest="profile",
                      help="tiny sizes: checks that every benchmark still runs")
    parser.add_argument("--only", default="", metavar="NAMES",
                        help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where to write the results (default {RESULTS.name} for full "
                        "and quick runs; smoke runs write nothing unless given)")
    args = parser.parse_args(argv)
    sizes = PROFILES[args.profile] if args.profile else FULL
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(only) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    host = machine()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kanban-bench-") as work:
        rows = run_all(sizes, Path(work), only,
                       say=lambda line: print(line, file=sys.stderr, flush=True))
    seconds = time.monotonic() - started
    print(render_table(rows))
    print()
    print(render_notes(rows))
    out = args.out if args.out is not None else (None if sizes.name == "smoke" else RESULTS)
    if out is not None:
        out.write_text(render_results(rows, host, mode=sizes.name, seconds=seconds))
        print(f"\nwritten to {out}", file=sys.stderr)
    return 1 if any(r.value is None for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
