"""The JSON API: the same read models, and the same shapes, as the CLI's `--json`.

GET /api/boards              = kanban boards list --json
GET /api/board?board=B       = kanban board --json (per_column=N)
GET /api/cards?board=&status= = kanban list --json: newest first, {cards, total, more}
                             (also limit, archived, profile, q, and before=ID to page on)
GET /api/cards/{id}          = kanban show --json
GET /api/cards/{id}/log      = kanban log --json
GET /api/columns/{status}    one column page by page: {board, status, cards, next}; each
                             card also says its activity in words (`doing`)
GET /api/inbox?board=B       = kanban inbox --json: every card waiting on a person (every
                             board unless board= is given; also limit)
GET /api/stats               the live stream's counters (viewers, reads, messages)
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kanban.approvals import ApprovalRecord, for_card_plan
from kanban.card_filter import CardFilter
from kanban.cards import boards_plan, card_detail_plan
from kanban.children import TreeTotals, tree_totals_plan
from kanban.columns import MAX_PAGE, column_plan
from kanban.errors import ValidationError
from kanban.inbox import DEFAULT_LIMIT as INBOX_LIMIT
from kanban.inbox import inbox_plan
from kanban.queries import board_snapshot_plan, card_page_plan
from kanban.readmodels import transcript_plan
from kanban.records import CardDetail
from kanban.state.plans import Plan
from kanban.states import CardStatus
from kanban.web.http import int_field, json_response, many, web_of
from kanban.web.render import card_json

DEFAULT_LIMIT = 50  # as `kanban list`


async def boards(request: Request) -> Response:
    return json_response({"boards": await web_of(request).adb.run(boards_plan())})


async def board(request: Request) -> Response:
    web = web_of(request)
    q = request.query_params
    per_column = int_field(q.get("per_column", str(web.per_column)), "per_column", low=1,
                           high=MAX_PAGE)
    snapshot = await web.adb.run(board_snapshot_plan(
        q.get("board") or web.board, now=web.kanban.clock(), per_column=per_column))
    return json_response(snapshot.to_json())


async def cards(request: Request) -> Response:
    web = web_of(request)
    q = request.query_params
    flt = CardFilter(
        board=q.get("board") or web.board, statuses=_statuses(q.getlist("status")),
        include_archived=q.get("archived") in ("1", "true"), profile=q.get("profile") or None,
        text=q.get("q") or None,
        before=int_field(q["before"], "before", low=1) if q.get("before") else None)
    limit = int_field(q.get("limit", str(DEFAULT_LIMIT)), "limit", low=1, high=MAX_PAGE)
    page = await web.adb.run(card_page_plan(flt, limit))
    return json_response({"cards": [c.to_json() for c in page.cards], "total": page.total,
                          "more": page.more})


async def card(request: Request) -> Response:
    card_id = int_field(request.path_params["card_id"], "card id", low=1)
    detail, approvals, totals = await web_of(request).adb.run(_shown_plan(card_id))
    return json_response({**detail.to_json(), "approvals": [a.to_json() for a in approvals],
                          "tree": totals.to_json()})


def _shown_plan(card_id: int) -> Plan[tuple[CardDetail, list[ApprovalRecord], TreeTotals]]:
    """What `kanban show --json` prints: the card's detail, its approvals and its tree's
    totals."""
    detail = yield from card_detail_plan(card_id)
    approvals = yield from for_card_plan(card_id)
    return detail, approvals, (yield from tree_totals_plan(card_id))


async def card_log(request: Request) -> Response:
    card_id = int_field(request.path_params["card_id"], "card id", low=1)
    transcript = await web_of(request).adb.run(transcript_plan(card_id))
    return json_response(transcript.to_json())


async def column(request: Request) -> Response:
    web = web_of(request)
    q = request.query_params
    statuses = _statuses([request.path_params["status"]])
    if len(statuses) != 1:
        raise ValidationError("name one column")
    status = statuses[0]
    limit = int_field(q.get("limit", str(web.per_column)), "limit", low=1, high=MAX_PAGE)
    page = await web.adb.run(column_plan(
        q.get("board") or web.board, status, limit=limit, after=q.get("after") or None,
        profile=q.get("profile") or None, text=q.get("q") or None))
    return json_response({**page.to_json(), "cards": [card_json(c) for c in page.cards]})


async def inbox(request: Request) -> Response:
    q = request.query_params
    limit = int_field(q.get("limit", str(INBOX_LIMIT)), "limit", low=1, high=MAX_PAGE)
    found = await web_of(request).adb.run(inbox_plan(q.get("board") or None, limit=limit))
    return json_response(found.to_json())


async def stats(request: Request) -> Response:
    """What the live board costs: viewers connected, change reads, messages, queries."""
    web = web_of(request)
    hub = web.hub
    return json_response({
        "viewers": hub.viewers, "cursor": hub.cursor, "refreshes": hub.stats.refreshes,
        "sent": hub.stats.sent, "dropped": hub.stats.dropped, "queries": web.adb.queries})


def _statuses(values: list[str]) -> list[str]:
    out = []
    for name in many(values):
        try:
            out.append(str(CardStatus(name)))
        except ValueError:
            known = ", ".join(s.value for s in CardStatus)
            raise ValidationError(f"unknown status {name!r} (one of: {known})") from None
    return out


ROUTES = [
    Route("/api/boards", boards),
    Route("/api/board", board),
    Route("/api/cards", cards),
    Route("/api/cards/{card_id}", card),
    Route("/api/cards/{card_id}/log", card_log),
    Route("/api/columns/{status}", column),
    Route("/api/inbox", inbox),
    Route("/api/stats", stats),
]
