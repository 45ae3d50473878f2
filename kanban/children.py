"""Child cards of a delegating card: created as one batch, watched until they finish."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select

from kanban.cards import NewCard, add_card, get_card
from kanban.errors import LimitExceeded, ValidationError
from kanban.states import TERMINAL, CardStatus
from state.models import Card, Run

card_t = Card.__table__
run_t = Run.__table__
SETTLED = TERMINAL | {CardStatus.BLOCKED}


@dataclass(frozen=True)
class ChildTask:
    """One task of a delegation; `after` names earlier tasks of the same batch by index."""

    title: str
    goal: str = ""
    context: str = ""
    profile: str = "default"
    toolsets: tuple[str, ...] | None = None
    after: tuple[int, ...] = ()


@dataclass(frozen=True)
class ChildStatus:
    id: int
    title: str
    status: str
    result: str | None
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None
    progress: str | None
    heartbeat_at: datetime | None

    @property
    def settled(self) -> bool:
        return self.status in SETTLED

    def to_json(self) -> dict[str, object]:
        """What a delegating agent gets back: status and summary, never the transcript."""
        out: dict[str, object] = {"id": self.id, "title": self.title, "status": self.status}
        if self.result is not None:
            out["summary"] = self.result
        if self.error is not None:
            out["error"] = self.error
        return out


def add_children(conn: Connection, parent_id: int, tasks: Sequence[ChildTask], *,
                 model: str | None, timeout_s: float | None, max_attempts: int,
                 max_depth: int, now: datetime) -> list[int]:
    """Create the batch under `parent_id`, resolving `after` indexes to card ids."""
    parent = get_card(conn, parent_id)
    if parent.depth + 1 > max_depth:
        raise LimitExceeded(f"children of #{parent_id} would be at depth {parent.depth + 1}; "
                            f"the limit is {max_depth}")
    ids: list[int] = []
    for index, task in enumerate(tasks):
        bad = [i for i in task.after if not 0 <= i < index]
        if bad:
            raise ValidationError(f"task {index} ('{task.title}'): 'after' may only name "
                                  f"earlier tasks of this batch (0..{index - 1}), not {bad}")
        card = add_card(conn, NewCard(
            title=task.title, goal=task.goal, context=task.context, board=parent.board,
            profile=task.profile, depends_on=[ids[i] for i in task.after], parent_id=parent_id,
            created_by=f"card:#{parent_id}", model=model, timeout_s=timeout_s,
            max_attempts=max_attempts,
            toolsets=",".join(task.toolsets) if task.toolsets is not None else None,
        ), now)
        ids.append(card.id)
    return ids


def children_status(conn: Connection, ids: Sequence[int]) -> list[ChildStatus]:
    live_run = (run_t.c.card_id == card_t.c.id) & (run_t.c.claim_token == card_t.c.claim_token)
    rows = conn.execute(
        select(card_t.c.id, card_t.c.title, card_t.c.status, card_t.c.result, card_t.c.error,
               card_t.c.started_at, card_t.c.finished_at, run_t.c.progress,
               run_t.c.heartbeat_at)
        .outerjoin(run_t, live_run)
        .where(card_t.c.id.in_(list(ids)))
        .order_by(card_t.c.id)
    ).all()
    return [ChildStatus(*row) for row in rows]


def unfinished_children(conn: Connection, parent_id: int) -> list[int]:
    rows = conn.execute(select(card_t.c.id).where(
        card_t.c.parent_id == parent_id, card_t.c.status.not_in(list(TERMINAL))))
    return list(rows.scalars())
