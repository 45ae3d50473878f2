"""What every route shares: the board's parts, input parsing, CSRF, errors as responses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from kanban.errors import (
    BoardNotFound,
    CardNotFound,
    ConfigError,
    DatabaseError,
    KanbanError,
    UsageError,
    ValidationError,
)
from kanban.service import Kanban
from kanban.state.aio import AsyncDatabase
from kanban.validation import MAX_ID
from kanban.web.hub import Hub
from kanban.web.security import Access

MAX_BODY = 1_048_576  # bytes; a card's context may hold 100,000 characters
FORM = "application/x-www-form-urlencoded"


@dataclass
class WebBoard:
    """The parts of a running web board."""

    kanban: Kanban  # writes: the CLI's library calls, run in worker threads
    adb: AsyncDatabase  # reads: the same plans, on the async store
    hub: Hub
    access: Access
    board: str  # shown when a request names none
    home: Path  # the folder of config.toml
    templates: jinja2.Environment
    per_column: int = 20


def web_of(request: Request) -> WebBoard:
    web: WebBoard = request.app.state.web
    return web


def no_store(response: Response) -> Response:
    response.headers["cache-control"] = "no-store"
    return response


def page(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    web = web_of(request)
    html = web.templates.get_template(template).render(
        csrf=web.access.csrf, default_board=web.board, **values)
    return no_store(HTMLResponse(html, status))  # type: ignore[return-value]


def json_response(data: Any, status: int = 200) -> JSONResponse:
    return no_store(JSONResponse(data, status))  # type: ignore[return-value]


def is_form_post(request: Request) -> bool:
    """A browser form (JavaScript off): answer with a redirect or a page, not JSON."""
    accept = request.headers.get("accept", "")
    return request.headers.get("content-type", "").startswith(FORM) and "text/html" in accept


async def read_input(request: Request) -> dict[str, Any]:
    """The body of a POST as a dict: JSON, or a urlencoded form (repeated keys → lists)."""
    body = await request.body()
    if len(body) > MAX_BODY:
        raise ValidationError(f"request body is {len(body):,} bytes; the limit is {MAX_BODY:,}")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not body:
        return {}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError("request body is not UTF-8") from None
    if kind == "application/json":
        try:
            data = json.loads(text)
        except ValueError:
            raise ValidationError("request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise ValidationError("request body must be a JSON object")
        return data
    if kind == FORM:
        out: dict[str, Any] = {}
        for key, value in parse_qsl(text, keep_blank_values=True, max_num_fields=200):
            out[key] = [*out[key], value] if isinstance(out.get(key), list) else (
                [out[key], value] if key in out else value)
        return out
    raise UsageError(f"unsupported content type {kind or 'none'!r}: send JSON or a form")


def require_csrf(request: Request, data: dict[str, Any]) -> None:
    """Cookie sessions must prove the request came from a page of this board."""
    if request.scope.get("state", {}).get("auth") == "bearer":
        return  # a script with the token: browsers never attach that header by themselves
    given = request.headers.get("x-csrf-token") or data.get("csrf")
    if not web_of(request).access.csrf_ok(given if isinstance(given, str) else None):
        raise CsrfRefused("missing or wrong CSRF token: reload the page and try again")


class CsrfRefused(KanbanError):
    """A state-changing request without this board's CSRF token."""


def text_field(data: dict[str, Any], name: str, *, default: str | None = None) -> str | None:
    value = data.get(name, default)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise ValidationError(f"{name} must be text")


def int_field(value: Any, name: str, *, low: int = -MAX_ID, high: int = MAX_ID) -> int:
    if isinstance(value, bool):
        raise ValidationError(f"{name} must be a whole number")
    if isinstance(value, str):
        text = value.strip().removeprefix("#")
        if not (text.isascii() and text.lstrip("-").isdigit()) or len(text) > 20:
            raise ValidationError(f"{name} must be a whole number, not {value!r}")
        value = int(text)
    if not isinstance(value, int):
        raise ValidationError(f"{name} must be a whole number")
    if not low <= value <= high:
        raise ValidationError(f"{name} must be between {low} and {high}")
    return value


def many(data: Any) -> list[str]:
    """A repeated or comma-separated parameter as a list."""
    values = data if isinstance(data, list) else [data] if data else []
    return [part.strip() for v in values for part in str(v).split(",") if part.strip()]


def safe_next(value: Any, fallback: str) -> str:
    """Where a form post returns to: a path on this server, never another site."""
    if isinstance(value, str) and value.startswith("/") and not value.startswith(("//", "/\\")):
        return value
    return fallback


def status_for(exc: KanbanError) -> int:
    if isinstance(exc, CardNotFound | BoardNotFound):
        return 404
    if isinstance(exc, CsrfRefused):
        return 403
    if isinstance(exc, DatabaseError):
        return 503
    if isinstance(exc, ValidationError | UsageError | ConfigError):
        return 400
    return 409  # the board's state forbids it: invalid transition, paused, limits


async def on_kanban_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, KanbanError)
    status = status_for(exc)
    if request.url.path.startswith("/api/") and not is_form_post(request):
        return json_response({"error": exc.message}, status)
    if request.url.path == "/events":
        return json_response({"error": exc.message}, status)
    return page(request, "error.html", status, message=exc.message, title="kanban: error",
                back=safe_next(request.headers.get("referer"), "/"))


def redirect_or_json(request: Request, data: dict[str, Any], payload: Any,
                     fallback: str, status: int = 200) -> Response:
    if is_form_post(request):
        return RedirectResponse(safe_next(data.get("next"), fallback), status_code=303)
    return json_response(payload, status)

