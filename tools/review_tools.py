"""The `review` toolset: a reviewer card's verdict on the card it reviews.

Granted only to cards made by a `reviewer:PROFILE` gate (role `reviewer`). Each tool
passes or sends back the reviewed card and completes the reviewer's own card, in one
fenced transaction.
"""

from __future__ import annotations

from typing import Any

from kanban import review, transitions
from kanban.agent.types import ToolResult
from kanban.cards import get_card
from kanban.errors import InvalidTransition
from kanban.state.store import Conn
from kanban.tools.kanban_tools import finishing
from kanban.tools.registry import ToolRegistry
from kanban.tools.scope import WorkerScope
from kanban.transitions import Actor

TOOLSET = "review"


def _subject(conn: Conn, scope: WorkerScope) -> int:
    own = get_card(conn, scope.card_id)
    if own.role != review.REVIEWER_ROLE or own.subject_id is None:
        raise InvalidTransition(f"#{own.id} is not a reviewer card")
    return own.subject_id


def kanban_approve(args: dict[str, Any], scope: WorkerScope) -> ToolResult:
    note = (args.get("note") or "").strip()
    with finishing(scope), scope.fenced() as conn:
        subject = _subject(conn, scope)
        now = scope.kb.clock()
        review.approve(conn, subject, now=now, actor=Actor(scope.actor.name), note=note or None)
        transitions.complete(conn, scope.card_id, f"approved #{subject}" +
                             (f": {note}" if note else ""), now=now, actor=scope.actor,
                             gated=False)  # a reviewer card has no gate of its own
    scope.finished = "completed"
    return ToolResult(f"#{subject} passed its review; your card #{scope.card_id} is done",
                      ends_run=True)


def kanban_request_changes(args: dict[str, Any], scope: WorkerScope) -> ToolResult:
    feedback = args["feedback"]
    with finishing(scope), scope.fenced() as conn:
        subject = _subject(conn, scope)
        now = scope.kb.clock()
        after = review.request_changes(conn, subject, feedback, now=now,
                                       actor=Actor(scope.actor.name))
        transitions.complete(conn, scope.card_id, f"requested changes on #{subject}: "
                             f"{feedback}", now=now, actor=scope.actor, gated=False)
    scope.finished = "completed"
    return ToolResult(f"#{subject} was sent back ({after.status}) with your feedback; your card "
                      f"#{scope.card_id} is done", ends_run=True)


def register(registry: ToolRegistry) -> None:
    def add(name: str, description: str, handler: Any, properties: dict[str, Any],
            required: tuple[str, ...] = ()) -> None:
        schema = {"type": "object", "properties": properties, "required": list(required),
                  "additionalProperties": False}
        registry.tool(name, description=description, toolset=TOOLSET, parameters=schema,
                      takes_context=True, parallel=False, exclusive=True)(handler)

    add("kanban_approve", "The work you review meets its goal: pass its review gate (it "
        "becomes done). Ends your run.", kanban_approve,
        {"note": {"type": "string", "maxLength": 20_000}})
    add("kanban_request_changes", "The work you review is not yet good enough: send it back "
        "for another attempt with concrete feedback. Ends your run.", kanban_request_changes,
        {"feedback": {"type": "string", "minLength": 1, "maxLength": 20_000}}, ("feedback",))
