"""Claim+complete cycles through the library's batched paths, for the SQLite and PostgreSQL
rows: one claim statement takes a card for each of `slots` slots (as a dispatcher claims),
and the cards' completions are group-committed by this one process (kanban.group_commit),
each waited for until it is durable. A running fleet does not do the second half: each
worker commits its own completion (docs/batching.md, Limits). The workers themselves do
nothing (as in the library loop rows): what is measured is the board's side of a cycle."""

from __future__ import annotations

import time
from collections.abc import Callable

SLOTS = 8  # the dispatcher's free slots: cards per claim statement


def dispatcher_cycles(target: str, seconds: float, *, slots: int = SLOTS,
                      start: Callable[[], float] = time.time) -> tuple[int, float, float]:
    """(cycles done, start, end) of claim-`slots`-then-complete-them rounds in a time box;
    `start` waits for the other processes and returns when the clock started."""
    from kanban.batch_writes import Completion
    from kanban.group_commit import GroupCommitter
    from kanban.service import Kanban
    from kanban.state import DbLocation, open_database

    db = open_database(DbLocation(target, "flag"))
    kb = Kanban(db)
    committer = GroupCommitter(db, kb.clock)
    kb.pause_state()  # connect and warm the pool before the clock starts
    done = 0
    try:
        began = start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            claimed = kb.claim(slots, lease_s=600)
            if not claimed:
                break
            acks = committer.write_all([Completion(c.card_id, c.claim_token, "ok",
                                                   f"card:#{c.card_id}") for c in claimed])
            for ack in acks:
                ack.result(0)  # raises if the completion was refused or failed
            done += len(claimed)
        finished = time.time()
    finally:
        db.dispose()
    return done, began, finished
