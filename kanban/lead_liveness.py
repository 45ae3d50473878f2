"""Leads whose `kanban run` process is gone: their card goes back to ready at once.

A lead card is claimed by the `kanban run` process itself (no dispatcher); its run row
names that process by host, pid and start time. On the same host, a pid that is gone, or
that now names a process started at another time, proves the lead's process dead, so the
card need not wait for its lease to lapse, and no attempt is spent (its death is not the
card's fault). After a reboot every process of the old boot is gone, so the proof holds.
"""

from __future__ import annotations

import socket
from datetime import datetime

from kanban import claims, transitions
from kanban.claims import Lease
from kanban.state.host import process_start
from kanban.state.store import Conn
from kanban.transitions import Actor

WHY = "its `kanban run` process is gone"


def lead_process_gone(lease: Lease, host: str | None = None) -> bool:
    """True only for a lead's run (no dispatcher) of this host whose process is provably
    gone."""
    if lease.dispatcher_id is not None or lease.pid is None or lease.host is None:
        return False
    if lease.host != (host or socket.gethostname()):
        return False
    start = process_start(lease.pid)
    return start is None or (lease.proc_start is not None and start != lease.proc_start)


def orphaned_leads(conn: Conn, *, board: str | None = None) -> list[Lease]:
    """Running leads whose process is provably gone."""
    return [lease for lease in claims.running_leases(conn, board=board)
            if lead_process_gone(lease)]


def requeue_orphaned_leads(conn: Conn, *, now: datetime, actor: Actor,
                           board: str | None = None,
                           card_id: int | None = None) -> list[int]:
    """Hand back (no attempt spent) running leads whose process is gone; their ids."""
    requeued = []
    for lease in orphaned_leads(conn, board=board):
        if card_id is None or lease.card_id == card_id:
            transitions.hand_back(conn, lease.card_id, WHY, now=now,
                                  actor=Actor(actor.name, lease.claim_token))
            requeued.append(lease.card_id)
    return requeued


def waiting_for(conn: Conn, card_id: int) -> str:
    """What a card that someone waits on is waiting for, in one line."""
    row = conn.one("SELECT status FROM card WHERE id = :id", {"id": card_id})
    if row is None:
        return f"#{card_id} is gone"
    status = row[0]
    if status == "running":
        return f"#{card_id} is running"
    if status == "ready":
        return f"#{card_id} is ready, for a dispatcher to claim it"
    if status == "waiting":
        kids = conn.all("SELECT id, status FROM card WHERE parent_id = :id AND status NOT IN "
                        "('done', 'failed', 'cancelled') ORDER BY id", {"id": card_id})
        listed = ", ".join(f"#{i} {s}" for i, s in kids) or "none left"
        return f"#{card_id} waits on its children ({listed})"
    if status == "blocked":
        return f"#{card_id} is blocked: it needs a person (`kanban unblock {card_id}`)"
    return f"#{card_id} is {status}"
