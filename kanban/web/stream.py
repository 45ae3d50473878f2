"""GET /events: the board's Server-Sent Events stream, fed by the shared hub."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from kanban.cards import require_board_plan
from kanban.web.http import int_field, web_of


async def events(request: Request) -> Response:
    """`?board=B&after=N` (the page's cursor); a reconnecting browser sends Last-Event-ID."""
    web = web_of(request)
    board = request.query_params.get("board") or web.board
    resume = request.headers.get("last-event-id") or request.query_params.get("after")
    after = int_field(resume, "Last-Event-ID", low=0) if resume else None
    await web.adb.run(require_board_plan(board))  # at connect only: a 404, not silence
    viewer = await web.hub.subscribe(board, after)
    return StreamingResponse(web.hub.stream(viewer), media_type="text/event-stream", headers={
        "cache-control": "no-store", "x-accel-buffering": "no"})


ROUTES = [Route("/events", events)]
