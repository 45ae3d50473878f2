"""Child cards of a delegating card: created as one batch, watched until they finish."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from kanban.cards import NewCard, add_card, get_card
from kanban.errors import LimitExceeded, ValidationError
from kanban.state.plans import Plan, Query, run_plan
from kanban.state.rows import as_time
from kanban.state.store import Conn
from kanban.states import TERMINAL, CardStatus

if TYPE_CHECKING:
    from kanban.state.config import Config

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
    key: str | None = None  # an unfinished card of the board with this key is reused
    skills: tuple[str, ...] = ()
    model: str | None = None  # None: the batch's model
    timeout_s: float | None = None  # None: the batch's
    max_attempts: int | None = None  # None: the batch's
    workspace: str | None = None  # stored form (kanban.workspaces.normalise_spec)
    role: str = "leaf"  # orchestrator: gets `delegate` while above max_depth
    review: str | None = None  # its review gate (kanban.review), as stored
    on_dependency_failure: str | None = None  # block | cancel when an `after` task fails


@dataclass(frozen=True)
class Delegation:
    """What a waiting card waits on: its children, the delegate call that made them (whose
    result the resumed conversation gets) and per child the toolsets that were not granted."""

    children: tuple[int, ...]
    call_id: str | None = None
    not_granted: tuple[dict[str, str], ...] = ()

    def to_json(self) -> str:
        return json.dumps({"children": list(self.children), "call_id": self.call_id,
                           "not_granted": list(self.not_granted)})

    @classmethod
    def from_json(cls, text: str | None) -> Delegation:
        data = json.loads(text) if text else {}
        return cls(tuple(int(i) for i in data.get("children", ())), data.get("call_id"),
                   tuple(data.get("not_granted", ())))


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
    activity: str | None = None  # JSON, see kanban.activity

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


def check_child_limit(conn: Conn, parent_id: int, adding: int, limit: int | None) -> None:
    """Refuse (LimitExceeded) when `adding` more children would pass the card's limit,
    counted over every child it ever made, whichever tool made them."""
    if limit is None:
        return
    made = int(conn.scalar("SELECT count(*) FROM card WHERE parent_id = :id", {"id": parent_id}))
    if made + adding > limit:
        raise LimitExceeded(f"#{parent_id} has made {made} child cards; {adding} more would "
                            f"pass its limit of {limit} (max_children_per_card): finish with "
                            "what you have, or do the rest yourself")


def add_children(conn: Conn, parent_id: int, tasks: Sequence[ChildTask], *,
                 model: str | None, timeout_s: float | None, max_attempts: int,
                 max_depth: int, now: datetime, max_children: int | None = None) -> list[int]:
    """Create the batch under `parent_id`, resolving `after` indexes to card ids."""
    parent = get_card(conn, parent_id)
    if parent.depth + 1 > max_depth:
        raise LimitExceeded(f"children of #{parent_id} would be at depth {parent.depth + 1}; "
                            f"the limit is {max_depth}")
    check_child_limit(conn, parent_id, len(tasks), max_children)
    ids: list[int] = []
    for index, task in enumerate(tasks):
        bad = [i for i in task.after if not 0 <= i < index]
        if bad:
            raise ValidationError(f"task {index} ('{task.title}'): 'after' may only name "
                                  f"earlier tasks of this batch (0..{index - 1}), not {bad}")
        if task.role == "orchestrator" and parent.depth + 1 >= max_depth:
            raise LimitExceeded(f"task {index} ('{task.title}'): an orchestrator at depth "
                                f"{parent.depth + 1} could not delegate (max_depth is "
                                f"{max_depth}); give it role 'leaf'")
        card = add_card(conn, NewCard(
            title=task.title, goal=task.goal, context=task.context, board=parent.board,
            profile=task.profile, depends_on=[ids[i] for i in task.after], parent_id=parent_id,
            created_by=f"card:#{parent_id}", model=task.model or model,
            timeout_s=task.timeout_s or timeout_s,
            max_attempts=task.max_attempts or max_attempts, workspace=task.workspace,
            toolsets=",".join(task.toolsets) if task.toolsets is not None else None,
            key=task.key, skills=task.skills, role=task.role, review=task.review,
            on_dependency_failure=task.on_dependency_failure,
        ), now)
        ids.append(card.id)
    return ids


def children_status(conn: Conn, ids: Sequence[int]) -> list[ChildStatus]:
    ids = list(ids)
    if not ids:
        return []
    marks = ", ".join(f":i{n}" for n in range(len(ids)))
    rows = conn.all(
        "SELECT c.id, c.title, c.status, c.result, c.error, c.started_at, c.finished_at, "
        "r.progress, r.heartbeat_at, r.activity FROM card c LEFT JOIN run r "
        "ON r.card_id = c.id AND "
        f"r.claim_token = c.claim_token WHERE c.id IN ({marks}) ORDER BY c.id",
        {f"i{n}": card_id for n, card_id in enumerate(ids)})
    return [ChildStatus(row[0], row[1], row[2], row[3], row[4], as_time(row[5]),
                        as_time(row[6]), row[7], as_time(row[8]), row[9]) for row in rows]


def unsettled(conn: Conn, ids: Sequence[int]) -> list[int]:
    """Those of `ids` not yet done, failed, cancelled or blocked."""
    ids = list(ids)
    if not ids:
        return []
    marks = ", ".join(f":i{n}" for n in range(len(ids)))
    settled = ", ".join(f"'{s}'" for s in sorted(SETTLED))
    return conn.column(f"SELECT id FROM card WHERE id IN ({marks}) AND status NOT IN "
                       f"({settled})", {f"i{n}": card_id for n, card_id in enumerate(ids)})


def waiting_on(conn: Conn, board: str, card_id: int) -> list[int]:
    """The waiting cards of `board` whose delegation includes card_id (usually its parent;
    a task reusing an unfinished card by key waits on a card of another parent)."""
    rows = conn.all("SELECT id, waiting_on FROM card WHERE board = :board AND "
                    "status = 'waiting'", {"board": board})
    return [row[0] for row in rows if card_id in Delegation.from_json(row[1]).children]


def child_count(conn: Conn, parent_id: int) -> int:
    return int(conn.scalar("SELECT count(*) FROM card WHERE parent_id = :id", {"id": parent_id}))


def unfinished_children(conn: Conn, parent_id: int) -> list[int]:
    return conn.column("SELECT id FROM card WHERE parent_id = :id AND status NOT IN "
                       "('done', 'failed', 'cancelled')", {"id": parent_id})


@dataclass(frozen=True)
class TreeTotals:
    """What a card and every card below it used: model calls (turns), tokens, dollars."""

    cards: int
    turns: int
    tokens: int
    cost: float
    unpriced: int = 0  # turns whose model had no known price: not in `cost`

    def to_json(self) -> dict[str, object]:
        return {"cards": self.cards, "turns": self.turns, "tokens": self.tokens,
                "cost": self.cost, "unpriced_calls": self.unpriced}


_TREE = ("WITH RECURSIVE tree(id) AS (SELECT id FROM card WHERE id = :id UNION ALL "
         "SELECT c.id FROM card c JOIN tree t ON c.parent_id = t.id) ")
_ROOT = ("WITH RECURSIVE up(id, parent_id) AS (SELECT id, parent_id FROM card WHERE id = :id "
         "UNION ALL SELECT c.id, c.parent_id FROM card c JOIN up ON c.id = up.parent_id) "
         "SELECT id FROM up WHERE parent_id IS NULL")


def tree_totals_plan(card_id: int) -> Plan[TreeTotals]:
    """Cards, turns, tokens and cost of a card and every card below it (both faces)."""
    rows = yield Query(_TREE + "SELECT count(*), coalesce(sum(input_tokens + output_tokens), "
                       "0), coalesce(sum(cost), 0), (SELECT count(*) FROM usage u JOIN run r "
                       "ON r.id = u.run_id WHERE r.card_id IN (SELECT id FROM tree)), "
                       "(SELECT count(*) FROM usage u JOIN run r ON r.id = u.run_id WHERE "
                       "r.card_id IN (SELECT id FROM tree) AND u.cost IS NULL) FROM card "
                       "WHERE id IN (SELECT id FROM tree)", {"id": card_id})
    cards, tokens, cost, turns, unpriced = rows[0]
    return TreeTotals(int(cards), int(turns), int(tokens), float(cost), int(unpriced))


def tree_totals(conn: Conn, card_id: int) -> TreeTotals:
    return run_plan(conn, tree_totals_plan(card_id))


def tree_root(conn: Conn, card_id: int) -> int:
    return int(conn.scalar(_ROOT, {"id": card_id}))


def tree_budget_spent(conn: Conn, card_id: int, config: Config) -> str | None:
    """Why no more work may start in card_id's tree (its root's profile's tree budget is
    spent), or None."""
    root = get_card(conn, tree_root(conn, card_id))
    profile = config.profile(root.profile) if root.profile in config.profiles else None
    if profile is None or (profile.tree_token_budget is None and profile.tree_max_cost is None):
        return None
    spent = tree_totals(conn, root.id)
    budget = profile.tree_token_budget
    if budget is not None and spent.tokens >= budget:
        return (f"the token budget of #{root.id}'s tree is spent ({spent.tokens:,} of "
                f"{budget:,} tokens over {spent.cards} cards)")
    if profile.tree_max_cost is not None and spent.cost >= profile.tree_max_cost:
        return (f"the cost budget of #{root.id}'s tree is spent (${spent.cost:.4f} of "
                f"${profile.tree_max_cost:.4f} over {spent.cards} cards)")
    return None
