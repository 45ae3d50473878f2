"""The `kanban` toolset: what a worker's agent may do to the board, and nothing more."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kanban import cards, claims, comments, dependencies, transitions
from kanban.agent.types import ToolResult
from kanban.cards import NewCard
from kanban.children import check_child_limit
from kanban.errors import LeaseLost, LimitExceeded
from kanban.records import CardDetail, CardRecord
from kanban.state.store import Conn
from kanban.tools.registry import ToolRegistry
from kanban.tools.scope import WorkerScope
from kanban.validation import DEPENDENCY_POLICIES, MAX_ID

TOOLSET = "kanban"
_ID = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
_TEXT = {"type": "string", "minLength": 1}
_POLICY = {"type": "string", "enum": list(DEPENDENCY_POLICIES), "description": (
    "if a card it depends on fails or is cancelled: block (default: it waits, blocked, for a "
    "person to retry that card) or cancel (it is cancelled too)")}


def _show(detail: CardDetail, own: bool) -> str:
    c = detail.card
    out: dict[str, Any] = {
        "id": c.id, "title": c.title, "goal": c.goal, "context": c.context, "status": c.status,
        "priority": c.priority, "attempt": c.attempt, "max_attempts": c.max_attempts,
        "parent_id": c.parent_id, "depth": c.depth, "result": c.result,
        "review_gate": c.review, "review_feedback": c.feedback,
        "dependencies": [{"id": d.id, "title": d.title, "status": d.status, "result": d.result}
                         for d in detail.depends_on],
        "children": [{"id": d.id, "title": d.title, "status": d.status, "result": d.result}
                     for d in detail.children],
        "comments": [{"author": m.author, "body": m.body} for m in detail.comments[-20:]],
        "attachments": [{"name": a.name, "size": a.size, "media_type": a.media_type}
                        for a in detail.attachments],
    }
    if own:
        out["earlier_attempts"] = [
            {"attempt": r.attempt, "outcome": r.outcome, "error": r.error, "progress": r.progress}
            for r in detail.runs if r.finished_at is not None
        ]
    return json.dumps(out, ensure_ascii=False)


def kanban_show(args: dict[str, Any], scope: WorkerScope) -> str:
    card_id = args.get("card_id", scope.card_id)
    with scope.kb.db.read() as conn:
        detail = cards.card_detail(conn, card_id, board=scope.board)
    return _show(detail, own=card_id == scope.card_id)


def kanban_complete(args: dict[str, Any], scope: WorkerScope) -> ToolResult:
    summary = args["summary"]
    if args.get("result"):
        summary = f"{summary}\n\n{args['result']}"
    summary = scope.on_complete(summary)
    verdict = scope.verify() if scope.verify is not None else None

    def complete(conn: Conn) -> str:
        transitions.complete(conn, scope.card_id, summary, now=scope.kb.clock(),
                             actor=scope.actor, gated=scope.gated, verdict=verdict)
        return (conn.scalar("SELECT status FROM card WHERE id = :id", {"id": scope.card_id})
                if scope.gated is not False else "done")

    with finishing(scope):  # tried again while the database is away, as every write here
        status = scope.write(complete, proven=True)
    scope.finished = "completed"
    if verdict is not None and not verdict.passed:
        return ToolResult(f"card #{scope.card_id} did not pass its review gate and is now "
                          f"{status}:\n{verdict.feedback}", ends_run=True)
    return ToolResult(f"card #{scope.card_id} is {status}", ends_run=True)


@contextmanager
def finishing(scope: WorkerScope) -> Iterator[None]:
    """While the card is being finished, its lease vanishing is expected, not a loss."""
    scope.finishing = True
    try:
        yield
    except BaseException:
        scope.finishing = False
        raise


def kanban_block(args: dict[str, Any], scope: WorkerScope) -> ToolResult:
    with finishing(scope):
        scope.write(lambda conn: transitions.block(conn, scope.card_id, args["reason"],
                                                   now=scope.kb.clock(), actor=scope.actor))
    scope.finished = "blocked"
    return ToolResult(f"card #{scope.card_id} is blocked; a person will look at it",
                      ends_run=True)


def kanban_heartbeat(args: dict[str, Any], scope: WorkerScope) -> str:
    try:  # a renewal twice is one renewal: tried again even when its commit is in doubt
        until = scope.write(lambda conn: claims.heartbeat(
            conn, scope.card_id, scope.claim_token, run_id=scope.run_id, lease_s=scope.lease_s,
            now=scope.kb.clock(), note=args.get("note")), fenced=False, idempotent=True)
    except LeaseLost as exc:
        scope.on_lease_lost(exc.message)
        raise
    return f"lease renewed until {until.isoformat(timespec='seconds')}"


def kanban_comment(args: dict[str, Any], scope: WorkerScope) -> str:
    target = args.get("card_id", scope.card_id)
    scope.write(lambda conn: comments.add_comment(
        conn, target, args["body"], author=scope.actor.name, actor=scope.actor,
        now=scope.kb.clock(), board=scope.board))
    return f"commented on #{target}"


def kanban_create(args: dict[str, Any], scope: WorkerScope) -> str:
    new = scope.write(lambda conn: _create(conn, args, scope))
    return json.dumps({"id": new.id, "status": new.status})


def _create(conn: Conn, args: dict[str, Any], scope: WorkerScope) -> CardRecord:
    own = cards.get_card(conn, scope.card_id)
    if own.depth + 1 > scope.max_depth:
        raise LimitExceeded(f"cannot create a card: depth {own.depth + 1} would exceed the "
                            f"limit of {scope.max_depth}")
    check_child_limit(conn, scope.card_id, 1, scope.max_children_per_card)
    return cards.add_card(conn, NewCard(
        title=args["title"], goal=args.get("goal", ""), context=args.get("context", ""),
        board=scope.board, priority=args.get("priority", 0), profile=own.profile,
        depends_on=args.get("depends_on", []), parent_id=scope.card_id,
        created_by=scope.actor.name, on_dependency_failure=args.get("on_dependency_failure"),
    ), scope.kb.clock())


def kanban_link(args: dict[str, Any], scope: WorkerScope) -> str:
    card_id, depends_on = args["card_id"], args["depends_on_id"]
    scope.write(lambda conn: dependencies.link(conn, card_id, depends_on, actor=scope.actor.name,
                                               now=scope.kb.clock(), board=scope.board))
    return f"#{card_id} now depends on #{depends_on}"


def register(registry: ToolRegistry) -> None:
    # Reads run in parallel; writes to the board keep call order (limits, comment order);
    # finishing the card runs last and alone.
    def add(name: str, description: str, handler: Any, properties: dict[str, Any],
            required: tuple[str, ...] = (), *, parallel: bool = False,
            exclusive: bool = False) -> None:
        schema = {"type": "object", "properties": properties, "required": list(required),
                  "additionalProperties": False}
        registry.tool(name, description=description, toolset=TOOLSET, parameters=schema,
                      takes_context=True, parallel=parallel, exclusive=exclusive)(handler)

    add("kanban_show", "Show a card of this board (default: your own) with its goal, context, "
        "dependencies' results, comments and earlier attempts.", kanban_show, {"card_id": _ID},
        parallel=True)
    add("kanban_complete", "Finish your card: hand back a short summary (and optionally a "
        "longer result). Ends your run.", kanban_complete,
        {"summary": _TEXT, "result": {"type": "string"}}, ("summary",), exclusive=True)
    add("kanban_block", "Stop and ask a person for help, saying why. Ends your run.",
        kanban_block, {"reason": _TEXT}, ("reason",), exclusive=True)
    add("kanban_heartbeat", "Report progress with a short note (also renews your lease).",
        kanban_heartbeat, {"note": {"type": "string", "maxLength": 2000}}, parallel=True)
    add("kanban_comment", "Comment on a card of this board (default: your own).",
        kanban_comment, {"body": _TEXT, "card_id": _ID}, ("body",))
    add("kanban_create", "Create a sub-card on this board, delegated by your card.",
        kanban_create, {"title": _TEXT, "goal": {"type": "string"},
                        "context": {"type": "string"}, "priority": {"type": "integer"},
                        "depends_on": {"type": "array", "items": _ID},
                        "on_dependency_failure": _POLICY}, ("title",))
    add("kanban_link", "Make one card of this board depend on another.", kanban_link,
        {"card_id": _ID, "depends_on_id": _ID}, ("card_id", "depends_on_id"))
