"""Child processes for test_batch_concurrency: dispatchers that claim several cards per
statement and complete them through group commit. Kept light (no pytest): spawn re-imports.

Run as `python -m tests.integration.batch_procs TARGET SLOTS`: claim and complete until
no card is left, printing `acked <card id>` once each completion is acknowledged."""

from __future__ import annotations

import sys
from pathlib import Path

from kanban.batch_writes import Completion
from kanban.group_commit import GroupCommitter
from kanban.service import Kanban
from kanban.state.db import open_database
from kanban.state.paths import DbLocation
from tests.integration.proc_workers import wait_at_gate


def claim_and_complete(kb: Kanban, committer: GroupCommitter, slots: int, *,
                       host: str) -> list[int] | None:
    """One round: claim up to `slots` cards in one statement, complete them together;
    the ids completed (None once nothing was left to claim)."""
    claimed = kb.claim(slots, lease_s=60, host=host)
    if not claimed:
        return None
    tickets = committer.write_all([Completion(c.card_id, c.claim_token, f"done by {host}",
                                              f"card:#{c.card_id}") for c in claimed])
    for ticket in tickets:
        ticket.result(0)  # a refusal here would be a double claim: let it fail the child
    return [c.card_id for c in claimed]


def race(target: str, gate: str, index: int, slots: int) -> list[int]:
    """Start with the others, then claim and complete until the board is empty."""
    db = open_database(DbLocation(target, "flag"))
    try:
        kb = Kanban(db)
        committer = GroupCommitter(db, kb.clock)
        wait_at_gate(Path(gate), index)
        done: list[int] = []
        while (ids := claim_and_complete(kb, committer, slots, host=f"proc-{index}")) is not None:
            done += ids
        return done
    finally:
        db.dispose()


def main(target: str, slots: int) -> None:
    db = open_database(DbLocation(target, "flag"))
    kb = Kanban(db)
    committer = GroupCommitter(db, kb.clock)
    while (ids := claim_and_complete(kb, committer, slots, host="killed")) is not None:
        for card_id in ids:
            print(f"acked {card_id}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
