"""Row 4: memory per running worker (PSS), forked from the warm parent against cold starts.

Slow scripted workers (heartbeats with delays) are sampled while all are running,
once each has begun its transcript (everything imported, the first model call under
way). PSS splits every shared page among the processes sharing it, so PSS summed over
workers is the memory they really cost; the forkserver's own share is in the note.

Rows 4.4 and 4.5 say where a forked worker's own memory comes from: a probe preloads as
the forkserver does, forks, and has the child open the board and make one model call
through the openai SDK (against a local server), counting the pages each step made its
own (private dirty memory); then the parent does the same, its pages all its own already.
The difference is copy-on-write: CPython writes an object's reference count whenever it
uses the object, so a child copies every page holding an object it touches.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    configure,
    kanban_at,
    median,
    new_board,
    pss_kib,
    rollup_kib,
    slow_steps,
    wait_until,
    write_script,
)
from bench.report import Goal, Row
from kanban.cards import NewCard


@dataclass(frozen=True)
class Sample:
    worker_kib: list[int]  # one per running worker
    parent_kib: int | None  # the forkserver's own PSS (warm only)
    dispatcher_kib: int | None = None


def floor_kib(path: Path) -> int | None:
    """PSS of a bare interpreter holding one sqlite3 connection that has read the board."""
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('SELECT count(*) FROM card').fetchall(); print('ready', flush=True); "
            "sys.stdin.read()")
    with subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                return None
            return pss_kib(proc.pid)
        finally:
            proc.kill()


def sample(work: Path, workers: int, *, cold: bool) -> Sample:
    path = work / ("cold" if cold else "warm") / "kanban.db"
    new_board(path)
    # Alive long enough to sample: cold workers boot for a second or two first.
    configure(path, model=write_script(path.parent / "slow.json", slow_steps(1.0, 30)))
    reader = Reader(path)
    try:
        with DispatcherProcess(path, max_workers=workers, cold=cold) as dispatcher, \
                kanban_at(path) as kb:
            for i in range(workers):
                kb.add_card(NewCard(title=f"slow {i}"))

            def all_talking() -> list[int]:
                dispatcher.check_alive()
                pids = [pid for (pid,) in reader.all(
                    "SELECT DISTINCT r.pid FROM run r JOIN card c ON c.id = r.card_id "
                    "JOIN message m ON m.run_id = r.id "
                    "WHERE c.status = 'running' AND r.pid IS NOT NULL")]
                return pids if len(pids) == workers else []

            pids = wait_until(all_talking, timeout=120, what=f"{workers} running workers",
                              interval=0.05)
            time.sleep(0.2)  # let the last one settle into its first model call
            worker_kib = [k for pid in pids if (k := pss_kib(pid)) is not None]
            dispatcher_kib = pss_kib(dispatcher.proc.pid)
            parents = {_ppid(pid) for pid in pids} - {None, dispatcher.proc.pid}
            parent_kib = None if cold or len(parents) != 1 else pss_kib(parents.pop() or 0)
            for (card_id,) in reader.all("SELECT id FROM card WHERE status = 'running'"):
                kb.cancel(card_id, reason="benchmark sampled")
        return Sample(worker_kib, parent_kib, dispatcher_kib)
    finally:
        reader.close()


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def private_dirty_kib() -> int:
    """This process's private dirty memory: pages only it maps that were written."""
    found = rollup_kib("self", "Private_Dirty")
    if found is None:
        raise RuntimeError("no Private_Dirty in /proc/self/smaps_rollup")
    return found


def _steps(db: Any, base_url: str, gateway: bool) -> dict[str, int]:
    """KiB of pages made private by a worker's first steps, in this process."""
    from kanban.agent.model import resolve_model
    from kanban.agent.openai_model import OpenAIModel
    from kanban.agent.retry import RetryPolicy
    from kanban.agent.types import Message
    from kanban.worker.forked import _rehearse_reads

    before = private_dirty_kib()
    with db.read() as conn:  # its connection and the reads before a first model call
        _rehearse_reads(conn)
    opened = private_dirty_kib()
    model = OpenAIModel("bench", api_key="bench", base_url=base_url,
                        retry=RetryPolicy(max_retries=0))
    try:
        model.complete([Message("user", "hello")], [])
    finally:
        model.close()
    steps = {"open": opened - before, "call": private_dirty_kib() - opened}
    if gateway:  # as a forked worker makes it: the forkserver's gateway calls
        called = private_dirty_kib()
        through = resolve_model("openai:bench", env={"OPENAI_API_KEY": "bench",
                                                     "OPENAI_BASE_URL": base_url})
        through.complete([Message("user", "hello")], [])
        steps["gateway"] = private_dirty_kib() - called
    return steps


def probe_main() -> None:
    """`python -c "from bench.memory import probe_main; probe_main()" DB BASE_URL`: one
    line of JSON, the first steps' copies in a forked child and in the parent."""
    from kanban.agent.gateway import forget, open_gateway
    from kanban.worker.forkserver import preload

    db = preload(sys.argv[1], ["openai"])
    gc.collect()
    gc.freeze()  # as the forkserver does before it forks
    gateway = open_gateway(_fork)  # as the forkserver does: its first child
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 1
        try:
            os.write(write, json.dumps(_steps(db, sys.argv[2], True)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        said = answer.read()
    os.waitpid(pid, 0)
    if not said:
        raise SystemExit("the forked child's steps failed (its traceback is above)")
    forked = json.loads(said)
    forget()  # the gateway leaves: the pages it shared with us are ours alone again
    if gateway is not None:
        os.waitpid(gateway, 0)
    print(json.dumps({"forked": forked, "alone": _steps(db, sys.argv[2], False)}), flush=True)


def _fork(child: Any) -> int:
    pid = os.fork()
    if pid == 0:
        child()  # never returns
    return pid


def copies(path: Path, probes: int) -> list[dict[str, dict[str, int]]]:
    """`probes` probes' findings, each from a fresh process."""
    from tests.support.llm_server import LLMServer, text_reply

    found = []
    with LLMServer(responder=lambda body: text_reply("done " * 40, chunk_chars=8)) as server:
        for _ in range(probes):
            out = subprocess.run(
                [sys.executable, "-c", "from bench.memory import probe_main; probe_main()",
                 str(path), server.openai_base_url],
                capture_output=True, text=True, timeout=120, check=True).stdout
            found.append(json.loads(out.strip().splitlines()[-1]))
    return found


def copy_rows(path: Path, probes: int) -> list[Row]:
    found = copies(path, probes)
    label = "the same in a process not forked"
    note = (f"median of {probes} probes; private dirty memory (/proc/self/smaps_rollup) a "
            "child forked from a preloaded, frozen parent makes its own, against the parent "
            "doing the same afterwards")

    def mib(where: str, step: str) -> float:
        return median([probe[where][step] for probe in found]) / 1024

    return [
        Row("4.4", "copied by a forked worker's board connection and first reads", "MiB",
            mib("forked", "open"), mib("alone", "open"), label, None, note),
        Row("4.5", "copied by a forked worker's first model call, openai SDK in the worker",
            "MiB", mib("forked", "call"), mib("alone", "call"), label, None,
            note + " (what the model gateway saves: a worker whose gateway is gone)"),
        Row("4.6", "copied by a forked worker's first model call, through the gateway", "MiB",
            mib("forked", "gateway"), mib("forked", "call"), "the SDK in the worker (4.5)",
            None, note + " (the call made by the forkserver's model gateway, as workers "
            "make it)"),
    ]


def run(sizes: Sizes, work: Path) -> list[Row]:
    warm = sample(work, sizes.memory_warm, cold=False)
    cold = sample(work, sizes.memory_cold, cold=True)
    warm_mib = median(warm.worker_kib) / 1024
    cold_mib = median(cold.worker_kib) / 1024
    parent = ("" if warm.parent_kib is None else
              f"; the forkserver itself adds {warm.parent_kib / 1024:.1f} MiB PSS once, "
              f"{warm.parent_kib / 1024 / len(warm.worker_kib):.1f} MiB per worker "
              f"at {len(warm.worker_kib)} workers")
    note = (f"median of {len(warm.worker_kib)} warm and {len(cold.worker_kib)} cold workers "
            f"running a slow script (PSS, /proc/PID/smaps_rollup){parent}")
    least = floor_kib(work / "warm" / "kanban.db")
    floor_mib = None if least is None else least / 1024
    floor_label = "floor: bare interpreter + one sqlite3 connection"
    rows = [
        Row("4.1", "PSS per running worker", "MiB", warm_mib, floor_mib, floor_label,
            Goal("value", "<=", 8, "MiB"), note),
        Row("4.2", "workers per GiB (1024 / PSS)", "", 1024 / warm_mib, 1024 / cold_mib,
            "cold workers per GiB (`python -m worker`)", Goal("value", ">=", 20)),
    ]
    if warm.dispatcher_kib is not None:
        rows.append(Row("4.3", "dispatcher PSS, workers running", "MiB",
                        warm.dispatcher_kib / 1024, floor_mib, floor_label,
                        Goal("value", "<=", 40, "MiB")))
    return rows + copy_rows(work / "warm" / "kanban.db", 1 if sizes.name == "smoke" else 3)
