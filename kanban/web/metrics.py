"""GET /metrics: the board's Prometheus metrics, behind the board's token like every page.

A scraper sends `Authorization: Bearer <token>` (Prometheus: `authorization:
credentials_file`). The counts come from counters the database keeps (kanban.metrics).
"""

from __future__ import annotations

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kanban.metrics import aggregates_plan, registry_of
from kanban.web.http import no_store, web_of


async def metrics(request: Request) -> Response:
    agg = await web_of(request).adb.run(aggregates_plan())
    body = generate_latest(registry_of(agg))
    return no_store(Response(body, headers={"content-type": CONTENT_TYPE_LATEST}))


ROUTES = [Route("/metrics", metrics, methods=["GET"])]
