"""The HTML pages: the board, one column page by page, and a card (the drawer's content).

Every page works with JavaScript off; board.js makes them live and opens cards in a
drawer. Each page reads through one plan on the async store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from kanban import attempts
from kanban.approvals import ApprovalRecord, for_card_plan
from kanban.cards import boards_plan, card_detail_plan
from kanban.columns import BoardCard, column_plan
from kanban.errors import ConfigError, ValidationError
from kanban.inbox import inbox_plan
from kanban.queries import BOARD_ORDER, board_snapshot_plan
from kanban.readmodels import ChildNode, Transcript, child_tree_plan, transcript_plan
from kanban.records import CardDetail
from kanban.state.config_file import resolve_config
from kanban.state.plans import Plan
from kanban.states import CardStatus
from kanban.web.http import int_field, many, page, web_of
from kanban.web.render import HERE
from kanban.workspaces import Workspace, resolve_plan

STATIC = HERE / "static"
# board.js clones this card's markup for cards that arrive live, so there is one markup
_BLANK_CARD = BoardCard(0, "", 0, "ready", "", "", datetime.min.replace(tzinfo=UTC),
                        datetime.min.replace(tzinfo=UTC), 0)
STATIC_FILES = {"board.js": "text/javascript", "board.css": "text/css"}
COLUMN_PAGE = 100


@dataclass(frozen=True)
class Filters:
    """What the board's filter form asks for; also the query string of its links."""

    board: str
    statuses: tuple[str, ...] = ()
    profile: str = ""
    text: str = ""

    @classmethod
    def of(cls, request: Request) -> Filters:
        q = request.query_params
        statuses = tuple(str(CardStatus(s)) for s in many(q.getlist("status"))
                         if s in CardStatus.__members__.values())
        return cls(board=q.get("board") or web_of(request).board, statuses=statuses,
                   profile=q.get("profile", "").strip(), text=q.get("q", "").strip()[:200])

    @property
    def active(self) -> bool:
        return bool(self.statuses or self.profile or self.text)

    def query(self, **extra: str) -> dict[str, Any]:
        out: dict[str, Any] = {"board": self.board}
        if self.statuses:
            out["status"] = ",".join(self.statuses)
        if self.profile:
            out["profile"] = self.profile
        if self.text:
            out["q"] = self.text
        return {**out, **extra}


async def board_page(request: Request) -> Response:
    web = web_of(request)
    f = Filters.of(request)
    snapshot = await web.adb.run(board_snapshot_plan(
        f.board, now=web.kanban.clock(), per_column=web.per_column, profile=f.profile or None,
        text=f.text or None, statuses=f.statuses))
    boards = await web.adb.run(boards_plan())
    shown = [str(s) for s in BOARD_ORDER if not f.statuses or s in f.statuses]
    return page(request, "board.html", snap=snapshot, boards=boards, filters=f,
                shown=shown, profiles=_profiles(request), now=snapshot.at,
                template_card=_BLANK_CARD, title=f"{f.board} · kanban")


async def column_page(request: Request) -> Response:
    """One column, a page at a time: the board's "more" link with JavaScript off."""
    web = web_of(request)
    f = Filters.of(request)
    status = _status(request.path_params["status"])
    after = request.query_params.get("after") or None
    column = await web.adb.run(column_plan(f.board, status, limit=COLUMN_PAGE, after=after,
                                           profile=f.profile or None, text=f.text or None))
    return page(request, "column.html", column=column, filters=f, now=web.kanban.clock(),
                title=f"{status} · {f.board} · kanban")


async def inbox_page(request: Request) -> Response:
    """Every card waiting on a person, with the forms that answer each (`kanban inbox`)."""
    web = web_of(request)
    found = await web.adb.run(inbox_plan(request.query_params.get("board") or None))
    return page(request, "inbox.html", inbox=found, now=web.kanban.clock(),
                title="inbox · kanban")


@dataclass(frozen=True)
class Drawer:
    """Everything the card drawer shows."""

    detail: CardDetail
    tree: list[ChildNode]
    transcript: Transcript
    approvals: list[ApprovalRecord]
    workspace: Workspace | None

    @property
    def run_labels(self) -> dict[int, str]:
        """Each run as `kanban show` labels it (`attempt 2`, `no attempt spent`)."""
        return attempts.labels([run for run, _ in self.transcript.runs],
                               self.transcript.attempts)


def drawer_plan(card_id: int, home: Path, defaults: Mapping[str, str | None]) -> Plan[Drawer]:
    detail = yield from card_detail_plan(card_id)
    tree = yield from child_tree_plan(card_id)
    transcript = yield from transcript_plan(card_id)
    approvals = yield from for_card_plan(card_id)
    try:
        workspace: Workspace | None = yield from resolve_plan(card_id, home, defaults)
    except ValidationError:
        workspace = None  # a broken spec: the card itself says so when it runs
    return Drawer(detail, tree, transcript, approvals, workspace)


async def card_page(request: Request) -> Response:
    """A card in full; `?partial=1` gives the drawer's inside alone (for board.js)."""
    web = web_of(request)
    card_id = int_field(request.path_params["card_id"], "card id", low=1)
    drawer = await web.adb.run(drawer_plan(card_id, web.home, _workspace_defaults(request)))
    partial = request.query_params.get("partial") == "1"
    return page(request, "drawer.html" if partial else "card.html", d=drawer,
                card=drawer.detail.card, now=web.kanban.clock(), profiles=_profiles(request),
                title=f"#{card_id} {drawer.detail.card.title} · kanban")


async def static_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC_FILES:
        return Response("not found\n", 404, media_type="text/plain")
    return FileResponse(STATIC / name, media_type=STATIC_FILES[name],
                        headers={"cache-control": "no-cache"})


def _status(text: str) -> str:
    try:
        return str(CardStatus(text))
    except ValueError:
        raise ValidationError(f"no such column {text!r}") from None


def _workspace_defaults(request: Request) -> Mapping[str, str | None]:
    try:
        return resolve_config(web_of(request).home).workspaces()
    except ConfigError:
        return {}


def _profiles(request: Request) -> list[str]:
    """The profiles config.toml names, for the add form and the filter."""
    try:
        config = resolve_config(web_of(request).home)
    except ConfigError:
        return []  # the board still shows; adding a card will say what is wrong
    return sorted(config.profiles)


ROUTES = [
    Route("/", board_page),
    Route("/columns/{status}", column_page),
    Route("/inbox", inbox_page),
    Route("/cards/{card_id}", card_page),
    Route("/static/{name}", static_file),
]
