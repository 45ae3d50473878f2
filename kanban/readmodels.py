"""Read models of one card beyond `card_detail`: its transcript and its tree of children.

Plans (kanban.state.plans), so `kanban log`/`kanban show` and the web drawer share them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kanban.attempts import EVENT_KINDS, budget_attempts
from kanban.cards import _CARD_SELECT, card_from_row, card_plan
from kanban.claims import run_transcript_plan
from kanban.records import CardRecord, EventRecord, MessageRecord, RunRecord
from kanban.state.plans import Plan, Query, Rows, in_list
from kanban.state.rows import with_times

TREE_DEPTH = 4
TREE_BUDGET = 50


CONTINUED = "continued"  # the event a resumed run's worker writes: from_run, messages


@dataclass(frozen=True)
class Continuation:
    """A run that continued an earlier run's conversation: its first `inherited` messages
    are that run's, copied when it resumed (shown once, under the run that wrote them)."""

    from_run: int
    inherited: int


@dataclass(frozen=True)
class Transcript:
    """`kanban log`: every run of one card with its messages."""

    card: CardRecord
    runs: list[tuple[RunRecord, list[MessageRecord]]]
    continued: dict[int, Continuation] = field(default_factory=dict)  # by run id
    attempts: dict[int, int | None] = field(default_factory=dict)  # kanban.attempts, by run id

    def inherited(self, run_id: int) -> int:
        """How many of the run's first messages it inherited from the run it continued."""
        found = self.continued.get(run_id)
        return found.inherited if found else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "card_id": self.card.id,
            "runs": [self._run_json(run, messages) for run, messages in self.runs],
        }

    def _run_json(self, run: RunRecord, messages: list[MessageRecord]) -> dict[str, Any]:
        found = self.continued.get(run.id)
        inherited = found.inherited if found else 0
        return {**run.to_json(), "continues_run": found.from_run if found else None,
                "inherited": inherited,
                "messages": [{**m.to_json(), "inherited": n < inherited}
                             for n, m in enumerate(messages)]}


def transcript_plan(card_id: int, *, board: str | None = None) -> Plan[Transcript]:
    card = yield from card_plan(card_id, board=board)
    runs = yield from run_transcript_plan(card_id)
    rows = yield Query("SELECT run_id, data FROM event WHERE card_id = :id AND kind = :kind "
                       "AND run_id IS NOT NULL ORDER BY id", {"id": card_id, "kind": CONTINUED})
    marks, params = in_list("k", EVENT_KINDS)
    counted: Rows = yield Query(
        f"SELECT * FROM event WHERE card_id = :id AND kind IN ({marks}) ORDER BY id",
        {"id": card_id, **params})
    attempts = budget_attempts([run for run, _ in runs],
                               [EventRecord.from_row(with_times(e)) for e in counted.maps()])
    return Transcript(card, runs, continuations(runs, rows), attempts)


def continuations(runs: list[tuple[RunRecord, list[MessageRecord]]],
                  events: list[tuple[Any, ...]]) -> dict[int, Continuation]:
    """Per resumed run, the run it continued and how many of its first messages are that
    run's, unchanged (a message the resumption changed, such as the children's report in
    place of a delegate call's result, is the resumed run's own)."""
    by_id = {run.id: messages for run, messages in runs}
    found: dict[int, Continuation] = {}
    for run_id, data in events:
        values = json.loads(data or "{}")
        source = values.get("from_run")
        if run_id not in by_id or source not in by_id:
            continue
        copied = by_id[run_id][:int(values.get("messages") or 0)]
        same = 0
        for mine, theirs in zip(copied, by_id[source], strict=False):
            if _said(mine) != _said(theirs):
                break
            same += 1
        found[run_id] = Continuation(int(source), same)
    return found


def _said(m: MessageRecord) -> tuple[Any, ...]:
    return (m.role, m.content, m.tool_calls, m.tool_call_id, m.name)


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
