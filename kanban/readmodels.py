"""Read models of one card beyond `card_detail`: its transcript and its tree of children.

Plans (kanban.state.plans), so `kanban log`/`kanban show` and the web drawer share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kanban.cards import _CARD_SELECT, card_from_row, card_plan
from kanban.claims import run_transcript_plan
from kanban.records import CardRecord, MessageRecord, RunRecord
from kanban.state.plans import Plan, Query, in_list

TREE_DEPTH = 4
TREE_BUDGET = 50


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


def transcript_plan(card_id: int, *, board: str | None = None) -> Plan[Transcript]:
    card = yield from card_plan(card_id, board=board)
    runs = yield from run_transcript_plan(card_id)
    return Transcript(card, runs)


@dataclass(frozen=True)
class ChildNode:
    card: CardRecord
    children: list[ChildNode]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.card.id, "title": self.card.title, "status": self.card.status,
                "children": [c.to_json() for c in self.children]}


def child_tree_plan(card_id: int, *, depth: int = TREE_DEPTH,
                    budget: int = TREE_BUDGET) -> Plan[list[ChildNode]]:
    """A card's descendants, a level per query, at most `depth` levels and `budget` cards."""
    kids: dict[int, list[ChildNode]] = {}
    level = [card_id]
    for _ in range(depth):
        if not level or budget <= 0:
            break
        marks, params = in_list("p", level)
        params["budget"] = budget
        rows = yield Query(f"{_CARD_SELECT} WHERE parent_id IN ({marks}) ORDER BY id "
                           "LIMIT :budget", params)
        budget -= len(rows)
        level = []
        for row in rows:
            card = card_from_row(row)
            node = ChildNode(card, kids.setdefault(card.id, []))
            kids.setdefault(card.parent_id, []).append(node)  # type: ignore[arg-type]
            level.append(card.id)
    return kids.get(card_id, [])
