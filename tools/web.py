"""The `web` toolset: `web_fetch` (a page's readable text) and `web_search` (a configured
search API). The HTML parser and the HTTP code load on first use, not at worker start."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote_plus

from kanban.agent.types import ToolResult
from kanban.state.errors import KanbanError
from kanban.tools.registry import ToolRegistry
from kanban.tools.workbench import Workbench

TOOLSET = "web"
SEARCH_URLS = {"brave": "https://api.search.brave.com/res/v1/web/search",
               "tavily": "https://api.tavily.com/search"}
MAX_RESULTS = 8
_TEXTUAL = ("text/", "application/json", "application/xml", "application/xhtml+xml",
            "application/javascript", "application/rss+xml", "application/atom+xml")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def web_fetch(args: dict[str, Any], bench: Workbench) -> str:
    hosts = bench.hosts()
    from kanban.tools import fetch

    page = fetch.get(args["url"], bench.web, hosts=hosts)
    if page.status >= 400:
        raise KanbanError(f"{page.url} answered HTTP {page.status}")
    kind = page.content_type or "text/html"
    if not kind.startswith(_TEXTUAL):
        raise KanbanError(f"{page.url} is {kind}, not a text page; refused")
    text = _decode(page.body, page.charset)
    title = ""
    if "html" in kind or (not page.content_type and "<html" in text[:2000].lower()):
        from kanban.tools.htmltext import html_to_text

        title, text = html_to_text(text, page.url)
    head = [f"URL: {page.url}"] + ([f"Title: {title}"] if title else [])
    if page.truncated:
        head.append(f"(the page is larger than {bench.web.max_bytes:,} bytes; the rest was "
                    "not fetched)")
    return bench.bounded("\n".join(head) + "\n\n" + (text or "(no text)"), "web")


def web_search(args: dict[str, Any], bench: Workbench) -> ToolResult | str:
    bench.hosts()  # refuses without a network; a list is checked on each request
    web = bench.web
    if web.search is None:
        return ToolResult("web_search is not set up: add `search = \"searxng\"` and "
                          "`search_url = \"http://...\"` (or search = \"brave\" / \"tavily\" "
                          "with `search_key_env`) under [web] in config.toml", is_error=True)
    key = None
    if web.search in ("brave", "tavily"):
        key = bench.search_key
        if not key:
            return ToolResult(f"web_search needs an API key: set {web.search_key_env or 'a '}"
                              "variable named by [web].search_key_env for the dispatcher",
                              is_error=True)
    results = _search(web.search, args["query"], web.search_url, key, bench)
    if not results:
        return f"no results for {args['query']!r}"
    lines = [f"{n}. {r['title']}\n   {r['url']}\n   {r['snippet']}"
             for n, r in enumerate(results[:MAX_RESULTS], 1)]
    return bench.bounded("\n".join(lines), "search")


def _search(provider: str, query: str, url: str | None, key: str | None,
            bench: Workbench) -> list[dict[str, str]]:
    from kanban.tools import fetch

    if provider == "searxng":
        if not url:
            raise KanbanError("[web].search_url must name the SearXNG instance")
        page = fetch.get(f"{url.rstrip('/')}/search?q={quote_plus(query)}&format=json",
                         bench.web, trusted=True, hosts=bench.hosts())
        items, fields = _json(page)["results"], ("title", "url", "content")
    elif provider == "brave":
        page = fetch.get(f"{url or SEARCH_URLS['brave']}?q={quote_plus(query)}"
                         f"&count={MAX_RESULTS}", bench.web, trusted=True, hosts=bench.hosts(),
                         headers={"X-Subscription-Token": key or "",
                                  "Accept": "application/json"})
        items, fields = _json(page).get("web", {}).get("results", []), (
            "title", "url", "description")
    else:
        body = json.dumps({"query": query, "max_results": MAX_RESULTS}).encode()
        page = fetch.get(url or SEARCH_URLS["tavily"], bench.web, body=body, trusted=True,
                         hosts=bench.hosts(), headers={"Authorization": f"Bearer {key}",
                                  "Content-Type": "application/json"})
        items, fields = _json(page)["results"], ("title", "url", "content")
    title, link, snippet = fields
    return [{"title": str(i.get(title, "")), "url": str(i.get(link, "")),
             "snippet": " ".join(str(i.get(snippet, "")).split())[:500]}
            for i in items if isinstance(i, dict)]


def _json(page: Any) -> Any:
    if page.status >= 400:
        raise KanbanError(f"the search service answered HTTP {page.status}")
    try:
        data = json.loads(page.body)
    except ValueError:
        raise KanbanError("the search service did not answer JSON") from None
    if not isinstance(data, dict):
        raise KanbanError("the search service answered an unexpected shape")
    return data


def _decode(body: bytes, charset: str | None) -> str:
    if charset is None:
        found = _META_CHARSET.search(body[:4096])
        charset = found.group(1).decode("ascii") if found else "utf-8"
    try:
        return body.decode(charset, "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


def register(registry: ToolRegistry) -> None:
    def add(name: str, description: str, handler: Any, prop: str, schema: dict[str, Any]
            ) -> None:
        registry.tool(name, description=description, toolset=TOOLSET, takes_context=True,
                      parameters={"type": "object", "properties": {prop: schema},
                                  "required": [prop], "additionalProperties": False})(handler)

    add("web_fetch", "Fetch a web page (http or https) and return its readable text.",
        web_fetch, "url", {"type": "string", "minLength": 8, "maxLength": 4000})
    add("web_search", "Search the web; returns titles, URLs and snippets.", web_search,
        "query", {"type": "string", "minLength": 1, "maxLength": 500})
