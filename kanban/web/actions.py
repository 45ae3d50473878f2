"""What a person does on the board: each route is the CLI's library call, in a worker thread.

Every route checks the CSRF token (security.Guard has already checked the session and
the origin), parses its input, makes one `Kanban` call (so the same transaction and the
same event as the CLI), and answers JSON, or a redirect for a form sent with JavaScript
off. The live stream then shows the change to every viewer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kanban.cards import NewCard
from kanban.edits import CardEdit
from kanban.errors import ValidationError
from kanban.records import CardRecord
from kanban.state.config_file import resolve_config
from kanban.tools.worktree_lifecycle import require_repository
from kanban.validation import BOARD_POLICY, MAX_ATTEMPTS_RANGE, PRIORITY_RANGE
from kanban.web.http import (
    WebBoard,
    int_field,
    many,
    read_input,
    redirect_or_json,
    require_csrf,
    text_field,
    web_of,
)

# (web, card id or None, input) -> (JSON payload, HTTP status, page to return to)
Call = Callable[[WebBoard, int | None, dict[str, Any]], tuple[Any, int, str]]


def action(call: Call) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        data = await read_input(request)
        require_csrf(request, data)
        web = web_of(request)
        raw_id = request.path_params.get("card_id")
        card_id = int_field(raw_id, "card id", low=1) if raw_id is not None else None
        payload, status, back = await run_in_threadpool(call, web, card_id, data)
        return redirect_or_json(request, data, payload, back, status)

    endpoint.__name__ = call.__name__
    return endpoint


def _card(card: CardRecord) -> tuple[dict[str, Any], int, str]:
    return card.to_json(), 200, f"/cards/{card.id}"


def add(web: WebBoard, _: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    board = text_field(data, "board") or web.board
    profile = text_field(data, "profile") or "default"
    chosen = resolve_config(web.home).profile(profile)  # as `kanban add` (KANBAN_CONFIG too)
    if chosen.workspace == "worktree":  # refused now, as `kanban add` refuses it
        require_repository(web.home)
    timeout = text_field(data, "timeout")
    card = web.kanban.add_card(NewCard(
        title=text_field(data, "title") or "", goal=text_field(data, "goal") or "",
        context=text_field(data, "context") or "", board=board,
        priority=int_field(data.get("priority") or 0, "priority",
                           low=PRIORITY_RANGE[0], high=PRIORITY_RANGE[1]),
        profile=profile,
        depends_on=tuple(int_field(d, "depends_on", low=1) for d in many(data.get("depends_on"))),
        max_attempts=int_field(data.get("max_attempts") or chosen.max_attempts, "max_attempts",
                               low=MAX_ATTEMPTS_RANGE[0], high=MAX_ATTEMPTS_RANGE[1]),
        timeout_s=_seconds(timeout) if timeout else None,
        on_dependency_failure=text_field(data, "on_dependency_failure") or None,  # "": board's
        review=text_field(data, "review") or chosen.review))  # a review gate, as `add`'s
    return card.to_json(), 201, f"/?board={board}"


def comment(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    comment_id = web.kanban.comment(card_id, text_field(data, "body") or "")
    return {"id": comment_id, "card_id": card_id}, 201, f"/cards/{card_id}"


def block(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    return _card(web.kanban.block(card_id, text_field(data, "reason") or ""))


def unblock(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    return _card(web.kanban.unblock(card_id, text_field(data, "note") or None))


def cancel(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    return _card(web.kanban.cancel(card_id, reason=text_field(data, "reason") or None))


def retry(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    return _card(web.kanban.retry(card_id))


def priority(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    value = int_field(data.get("priority"), "priority", low=PRIORITY_RANGE[0],
                      high=PRIORITY_RANGE[1])
    card, changed = web.kanban.edit(card_id, CardEdit(priority=value))  # as `kanban edit`
    return {"card": card.to_json(), "changed": changed}, 200, f"/cards/{card.id}"


def dependency_policy(web: WebBoard, card_id: int | None, data: dict[str, Any]
                      ) -> tuple[Any, int, str]:
    """What the card does when a dependency fails: block, cancel, or board (its board's)."""
    assert card_id is not None
    value = text_field(data, "on_dependency_failure") or BOARD_POLICY
    card, changed = web.kanban.edit(card_id, CardEdit(on_dependency_failure=value))
    return {"card": card.to_json(), "changed": changed}, 200, f"/cards/{card.id}"


def approve(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    return _card(web.kanban.approve(card_id, reason=text_field(data, "note") or None))


def deny(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    return _card(web.kanban.deny(card_id, reason=text_field(data, "reason") or None))


def reject(web: WebBoard, card_id: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
    assert card_id is not None
    return _card(web.kanban.reject(card_id, text_field(data, "feedback") or ""))


def _pause(paused: bool) -> Call:
    def change(web: WebBoard, _: int | None, data: dict[str, Any]) -> tuple[Any, int, str]:
        board = text_field(data, "board") or None  # none: spawning everywhere
        web.kanban.set_paused(paused, board=board)
        state = web.kanban.pause_state(board)
        payload = {"board": board, "paused": state.paused,
                   "paused_globally": state.global_paused}
        return payload, 200, f"/?board={board or web.board}"

    change.__name__ = "pause" if paused else "resume"
    return change


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValidationError(f"timeout must be a number of seconds, not {text!r}") from None


ROUTES = [
    Route("/api/cards", action(add), methods=["POST"]),
    Route("/api/cards/{card_id}/comment", action(comment), methods=["POST"]),
    Route("/api/cards/{card_id}/block", action(block), methods=["POST"]),
    Route("/api/cards/{card_id}/unblock", action(unblock), methods=["POST"]),
    Route("/api/cards/{card_id}/cancel", action(cancel), methods=["POST"]),
    Route("/api/cards/{card_id}/retry", action(retry), methods=["POST"]),
    Route("/api/cards/{card_id}/priority", action(priority), methods=["POST"]),
    Route("/api/cards/{card_id}/dependency-policy", action(dependency_policy),
          methods=["POST"]),
    Route("/api/cards/{card_id}/approve", action(approve), methods=["POST"]),
    Route("/api/cards/{card_id}/deny", action(deny), methods=["POST"]),
    Route("/api/cards/{card_id}/reject", action(reject), methods=["POST"]),
    Route("/api/pause", action(_pause(True)), methods=["POST"]),
    Route("/api/resume", action(_pause(False)), methods=["POST"]),
]
