"""The `orchestrator` toolset: a long-lived orchestrator steers the cards of its board.

Granted to cards whose profile has `role = "orchestrator"`, on their own board only.
"""

from __future__ import annotations

import json
from typing import Any

from kanban import transitions
from kanban.card_filter import CardFilter, list_cards_plan
from kanban.cards import get_card
from kanban.state.plans import run_plan
from kanban.states import CardStatus
from kanban.tools.registry import ToolRegistry
from kanban.tools.scope import WorkerScope
from kanban.transitions import Actor
from kanban.validation import MAX_ID

TOOLSET = "orchestrator"
LIST_LIMIT = 100  # cards per kanban_list answer, newest last
RESULT_CHARS = 300  # of each card's result in a list


def kanban_list(args: dict[str, Any], scope: WorkerScope) -> str:
    status = args.get("status")
    flt = CardFilter(board=scope.board, statuses=(status,) if status else (),
                     profile=args.get("profile") or None, text=args.get("text") or None)
    with scope.kb.db.read() as conn:
        found = run_plan(conn, list_cards_plan(flt))
    shown = found[-LIST_LIMIT:]
    return json.dumps({
        "cards": [{"id": c.id, "title": c.title, "status": c.status, "profile": c.profile,
                   "parent_id": c.parent_id, "error": c.error,
                   "result": (c.result or "")[:RESULT_CHARS] or None} for c in shown],
        "total": len(found), "shown": len(shown),
    }, ensure_ascii=False)


def kanban_unblock(args: dict[str, Any], scope: WorkerScope) -> str:
    card_id, note = args["card_id"], args["note"]
    with scope.fenced() as conn:  # fenced on the orchestrator's own lease
        get_card(conn, card_id, board=scope.board)  # another board's card: not found
        # the target is not the orchestrator's own card: no claim token to fence it with
        after = transitions.unblock(conn, card_id, note, now=scope.kb.clock(),
                                    actor=Actor(scope.actor.name))
    return f"#{card_id} is {after.status}"


def register(registry: ToolRegistry) -> None:
    statuses = sorted(str(s) for s in CardStatus)
    registry.tool(
        "kanban_list", toolset=TOOLSET, takes_context=True, parallel=True,
        description="List the cards of your board (oldest first, at most 100), filtered by "
                    "status, profile or text in the title.",
        parameters={"type": "object", "additionalProperties": False, "properties": {
            "status": {"type": "string", "enum": statuses},
            "profile": {"type": "string", "maxLength": 64},
            "text": {"type": "string", "maxLength": 500}}})(kanban_list)
    registry.tool(
        "kanban_unblock", toolset=TOOLSET, takes_context=True, parallel=False,
        description="Return a blocked card of your board to the queue with a note its next "
                    "attempt sees.",
        parameters={"type": "object", "additionalProperties": False,
                    "required": ["card_id", "note"], "properties": {
                        "card_id": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
                        "note": {"type": "string", "minLength": 1, "maxLength": 20_000}}},
    )(kanban_unblock)
