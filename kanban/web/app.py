"""The web board as one ASGI application: routes over the library, behind the guard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette

from kanban.errors import KanbanError
from kanban.service import Kanban
from kanban.state.aio import open_async
from kanban.state.paths import DbLocation
from kanban.web import actions, api, metrics, pages, stream
from kanban.web.http import WebBoard, on_kanban_error
from kanban.web.hub import Hub
from kanban.web.render import make_templates
from kanban.web.security import Access, ASGIApp, Guard
from kanban.web.watch import change_source


def build(kanban: Kanban, location: DbLocation, access: Access, *, board: str = "default",
          per_column: int = 20) -> WebBoard:
    """The parts of a web board over an open database."""
    adb = open_async(kanban.db)
    hub = Hub(adb, change_source(adb), kanban.clock)
    return WebBoard(kanban=kanban, adb=adb, hub=hub, access=access, board=board,
                    home=location.home, templates=make_templates(), per_column=per_column)


def create_app(web: WebBoard) -> ASGIApp:
    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await web.hub.start()
        try:
            yield
        finally:
            await web.hub.stop()
            await web.adb.close()

    app = Starlette(
        routes=[*pages.ROUTES, *api.ROUTES, *actions.ROUTES, *stream.ROUTES,
                *metrics.ROUTES],
        exception_handlers={KanbanError: on_kanban_error},
        lifespan=lifespan,
    )
    app.state.web = web
    return Guard(app, web.access)
