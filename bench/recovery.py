"""Row 6: from a worker's failure to its card running again, with a small lease.

(a) SIGKILL of the worker's process group while the dispatcher lives: the dispatcher
    reaps it at once and requeues the card with the jittered retry backoff.
(b) SIGSTOP (alive but silent): nothing exits, so only the lease can tell; the
    dispatcher's tick finds it expired, kills the group, confirms it dead, requeues.
Measured from the signal to the next run's `started_at`. The baseline is the delay
the design itself imposes: the backoff the requeue drew (`run_after` - requeue), plus
the lease for (b).
"""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import (
    DispatcherProcess,
    Reader,
    Sizes,
    configure,
    kanban_at,
    median,
    new_board,
    slow_steps,
    ts,
    wait_until,
    write_script,
)
from bench.report import Goal, Row
from kanban.cards import NewCard

if TYPE_CHECKING:
    from kanban.service import Kanban


@dataclass(frozen=True)
class Recovery:
    seconds: float  # signal → next run started
    backoff_s: float  # the retry backoff the requeue drew (run_after - requeue time)


def _running_pid(reader: Reader, card_id: int, attempt: int) -> int:
    """The worker's pid once its agent has started (transcript begun)."""

    def talking() -> int | None:
        return reader.one(
            "SELECT r.pid FROM run r JOIN message m ON m.run_id = r.id "
            "WHERE r.card_id = ? AND r.attempt = ? AND r.pid IS NOT NULL AND r.finished_at "
            "IS NULL LIMIT 1", card_id, attempt)

    return int(wait_until(talking, timeout=60, what=f"card #{card_id} attempt {attempt}",
                          interval=0.01))


def _one(reader: Reader, kb: Kanban, dispatcher: DispatcherProcess, title: str,
         sig: signal.Signals) -> Recovery:
    card_id = kb.add_card(NewCard(title=title)).id
    pid = _running_pid(reader, card_id, 1)
    at = time.time()
    os.killpg(pid, sig)

    def rerun() -> str | None:
        dispatcher.check_alive()
        return reader.one("SELECT started_at FROM run WHERE card_id = ? AND attempt = 2",
                          card_id)

    started = wait_until(rerun, timeout=60, what=f"card #{card_id} to run again", interval=0.01)
    data, requeued_at = reader.all("SELECT data, at FROM event WHERE card_id = ? "
                                   "AND kind = 'requeued' ORDER BY id LIMIT 1", card_id)[0]
    backoff = ts(json.loads(data)["run_after"]) - ts(requeued_at)
    kb.cancel(card_id, reason="benchmark measured")
    with suppress(ProcessLookupError):  # the dispatcher has killed it already
        os.killpg(pid, signal.SIGKILL)
    return Recovery(ts(started) - at, backoff)


def measure(work: Path, sizes: Sizes) -> tuple[list[Recovery], list[Recovery]]:
    path = work / "kanban.db"
    new_board(path)
    configure(path, lease_s=sizes.lease_s,
              model=write_script(path.parent / "slow.json", slow_steps(0.5, 200)))
    killed: list[Recovery] = []
    stopped: list[Recovery] = []
    reader = Reader(path)
    try:
        with DispatcherProcess(path, max_workers=4) as dispatcher, kanban_at(path) as kb:
            warm_up_card = kb.add_card(NewCard(title="warm-up")).id
            _running_pid(reader, warm_up_card, 1)  # forkserver up
            kb.cancel(warm_up_card)
            for i in range(sizes.recovery_repeats):
                killed.append(_one(reader, kb, dispatcher, f"killed {i}", signal.SIGKILL))
                stopped.append(_one(reader, kb, dispatcher, f"stopped {i}", signal.SIGSTOP))
    finally:
        reader.close()
    return killed, stopped


def run(sizes: Sizes, work: Path) -> list[Row]:
    killed, stopped = measure(work, sizes)
    lease = sizes.lease_s
    goal = Goal("value", "<=", lease + 5, "s")
    n = len(killed)
    return [
        Row("6.1", "recovery, worker SIGKILLed, dispatcher alive: kill → rerun", "s",
            median(r.seconds for r in killed), median(r.backoff_s for r in killed),
            "retry backoff drawn", goal,
            f"median of {n}; lease_s = {lease:g}; the backoff is retry_delay(1) = 2 s x "
            "[0.5, 1) from kanban/transitions.py, so ratio - 1 is the detection overhead"),
        Row("6.2", "recovery, worker SIGSTOPped: stop → lease expiry → rerun", "s",
            median(r.seconds for r in stopped), median(lease + r.backoff_s for r in stopped),
            "lease + retry backoff drawn", goal,
            f"median of {n}; detection waits for the lease to lapse and the next 1 s "
            "dispatcher tick, then kill-and-confirm, then the backoff"),
    ]
