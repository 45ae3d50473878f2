"""Read models the CLI needs that `Kanban` does not offer as one call.

Each is a single read transaction over library functions; no SQL lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kanban.cards import get_card
from kanban.claims import run_transcript
from kanban.control import DispatcherInfo, live_dispatchers, pause_state
from kanban.errors import BoardNotFound
from kanban.queries import live_workers, status_counts
from kanban.records import CardRecord, MessageRecord, RunRecord

if TYPE_CHECKING:
    from kanban.cron_jobs import UpcomingFire
    from kanban.service import Kanban


def dispatcher_json(d: DispatcherInfo) -> dict[str, Any]:
    return {"id": d.id, "host": d.host, "pid": d.pid, "started_at": d.started_at.isoformat(),
            "heartbeat_at": d.heartbeat_at.isoformat()}


@dataclass(frozen=True)
class Status:
    """`kanban status`: counts per state, pause flags and live dispatchers."""

    board: str | None
    counts: dict[str, int]
    paused_globally: bool
    paused_boards: list[str]
    dispatchers: list[DispatcherInfo]
    workers: int
    next_fires: list[UpcomingFire]

    def to_json(self) -> dict[str, Any]:
        return {
            "board": self.board, "counts": self.counts, "total": sum(self.counts.values()),
            "paused_globally": self.paused_globally, "paused_boards": self.paused_boards,
            "dispatchers": [dispatcher_json(d) for d in self.dispatchers],
            "workers": self.workers,
            "next_fires": [f.to_json() for f in self.next_fires],
        }


def status(kanban: Kanban, board: str | None = None) -> Status:
    boards = kanban.boards()
    if board is not None and board not in {b["name"] for b in boards}:
        raise BoardNotFound(board)
    with kanban.db.read() as conn:
        return Status(
            board=board,
            counts=status_counts(conn, board),
            paused_globally=pause_state(conn, None).global_paused,
            paused_boards=[str(b["name"]) for b in boards if b["paused"]],
            dispatchers=live_dispatchers(conn, kanban.clock()),
            workers=len(live_workers(conn, board=board)),
            next_fires=_next_fires(kanban, board),
        )


def _next_fires(kanban: Kanban, board: str | None) -> list[UpcomingFire]:
    from kanban.cron_jobs import next_fires  # here: cron's imports cost every command

    return next_fires(kanban.db, kanban.clock(), board=board)


@dataclass(frozen=True)
class Transcript:
    """`kanban log`: every run of one card with its messages."""

    card: CardRecord
    runs: list[tuple[RunRecord, list[MessageRecord]]]

    def to_json(self) -> dict[str, Any]:
        return {
            "card_id": self.card.id,
            "runs": [{**run.to_json(), "messages": [m.to_json() for m in messages]}
                     for run, messages in self.runs],
        }


def transcript(kanban: Kanban, card_id: int) -> Transcript:
    with kanban.db.read() as conn:
        return Transcript(get_card(conn, card_id), run_transcript(conn, card_id))


@dataclass(frozen=True)
class ChildNode:
    card: CardRecord
    children: list[ChildNode]


def child_tree(kanban: Kanban, children: tuple[CardRecord, ...], *, depth: int = 4,
               budget: int = 50) -> list[ChildNode]:
    """Children and their descendants, bounded in depth and total cards."""
    nodes: list[ChildNode] = []
    for child in children:
        if budget <= 0:
            break
        budget -= 1
        grandchildren: list[ChildNode] = []
        if depth > 1:
            grandchildren = child_tree(kanban, kanban.detail(child.id).children,
                                       depth=depth - 1, budget=budget)
            budget -= _size(grandchildren)
        nodes.append(ChildNode(child, grandchildren))
    return nodes


def _size(nodes: list[ChildNode]) -> int:
    return sum(1 + _size(n.children) for n in nodes)
