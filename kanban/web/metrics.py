"""GET /metrics: the board's Prometheus metrics, behind the board's token like every page.

A scraper sends `Authorization: Bearer <token>` (Prometheus: `authorization:
credentials_file`). The counts come from counters the database keeps (kanban.metrics).
"""

from __future__ import annotations

from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kanban.metrics import aggregates_plan, registry_of
from kanban.web.http import no_store, web_of


async def metrics(request: Request) -> Response:
    agg = await web_of(request).adb.run(aggregates_plan())
    # the format the scraper asks for (OpenMetrics, or the plain text one), as the client does
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return no_store(Response(encode(registry_of(agg)), headers={"content-type": content_type}))


ROUTES = [Route("/metrics", metrics, methods=["GET"])]
