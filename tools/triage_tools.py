"""The `triage` toolset: a decomposer proposes the graph of cards for a rough idea.

Granted to decomposer cards (role `decomposer`). The tool's context decides what a
proposal does: on the board (`BoardDecomposer`) it creates the cards and finishes the
decomposer's card; in `kanban triage --dry-run` (`DryRun`) it is only recorded.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from kanban import transitions, triage
from kanban.agent.types import ToolResult
from kanban.cards import get_card
from kanban.errors import InvalidTransition
from kanban.tools.kanban_tools import finishing
from kanban.tools.registry import ToolRegistry
from kanban.tools.scope import WorkerScope
from kanban.triage import Graph

TOOLSET = "triage"


class Decomposer(Protocol):
    profiles: Collection[str]
    max_cards: int

    def propose(self, graph: Graph) -> ToolResult: ...


@dataclass
class BoardDecomposer:
    """On the board: the graph becomes the triaged card's children, in one fenced write."""

    scope: WorkerScope
    profiles: Collection[str]
    max_cards: int = 10

    def propose(self, graph: Graph) -> ToolResult:
        scope = self.scope
        with finishing(scope), scope.fenced() as conn:
            own = get_card(conn, scope.card_id)
            if own.role != triage.DECOMPOSER_ROLE or own.subject_id is None:
                raise InvalidTransition(f"#{own.id} is not a decomposer card")
            now = scope.kb.clock()
            made = triage.decompose(conn, own.subject_id, graph, now=now, actor=scope.actor)
            listed = ", ".join(f"#{c.id} {c.title}" for c in made)
            transitions.complete(conn, scope.card_id, f"split #{own.subject_id} into "
                                 f"{len(made)} cards: {listed}", now=now, actor=scope.actor,
                                 gated=False)  # a decomposer card has no gate of its own
        scope.finished = "completed"
        return ToolResult(json.dumps({"created": [{"id": c.id, "title": c.title,
                                                   "status": c.status} for c in made]}),
                          ends_run=True)


@dataclass
class DryRun:
    """`--dry-run`: the proposal is kept for printing; nothing is created."""

    profiles: Collection[str]
    max_cards: int = 10
    graph: Graph | None = field(default=None)

    def propose(self, graph: Graph) -> ToolResult:
        self.graph = graph
        return ToolResult(f"proposal of {len(graph.cards)} cards recorded", ends_run=True)


def kanban_decompose(args: dict[str, Any], target: Decomposer) -> ToolResult:
    graph = triage.parse_graph(args["cards"], target.profiles, max_cards=target.max_cards)
    return target.propose(graph)


def register(registry: ToolRegistry) -> None:
    card = {"type": "object", "additionalProperties": False, "required": ["title"],
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 500},
                "goal": {"type": "string"}, "context": {"type": "string"},
                "profile": {"type": "string", "maxLength": 64},
                "depends_on": {"type": "array", "items": {"type": "integer", "minimum": 1},
                               "description": "numbers (1-based) of earlier cards in this list"}}}
    registry.tool(
        "kanban_decompose", toolset=TOOLSET, takes_context=True, parallel=False, exclusive=True,
        description="Propose the cards that together achieve the idea, in order: each may "
                    "depend on cards listed before it. Ends your run.",
        parameters={"type": "object", "additionalProperties": False, "required": ["cards"],
                    "properties": {"cards": {"type": "array", "minItems": 1, "items": card}}},
    )(kanban_decompose)
