"""HTML from templates that escape everything, and the small formatting they share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from kanban.activity import cost_text, describe, money
from kanban.attempts import event_details
from kanban.attempts import label as attempt_label
from kanban.columns import BoardCard
from kanban.states import STATUS_NAMES, TERMINAL, error_label
from kanban.textsafety import visible
from kanban.when import age

HERE = Path(__file__).resolve().parent
TEXT_SHOWN = 4_000  # characters of one message or section shown before "… more"
MESSAGES_SHOWN = 300  # per run, in the drawer


def clip(text: str | None, limit: int = TEXT_SHOWN) -> tuple[str, int]:
    """The text shown and how many characters were left out."""
    text = text or ""
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def tool_calls(raw: str | list[Any] | None) -> list[tuple[str, str]]:
    """A message's tool calls as (name, arguments as text), whatever the provider's format."""
    calls = json.loads(raw) if isinstance(raw, str) else (raw or [])
    out = []
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", fn.get("input", ""))
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, indent=1)
        out.append((str(fn.get("name", "?")), text))
    return out


def card_json(card: BoardCard, approvals: list[str] | None = None) -> dict[str, Any]:
    """A board card as the CLI's `--json` has it, plus its activity in words (`doing`), so
    the page's script prints what the server's templates print, and the commands it waits
    to have approved."""
    return {**card.to_json(), "doing": describe(card.activity, compact=True),
            "awaiting_approval": approvals or []}


def _shown(value: Any) -> Any:
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return visible(value)
    return value


def make_templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name: card text is hostile
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,  # controls and bidi overrides spelled out, as on the terminal
    )
    env.filters["age"] = age
    env.filters["iso"] = lambda t: t.isoformat() if t else ""
    env.filters["thousands"] = lambda n: f"{n:,}" if n is not None else ""
    env.filters["money"] = money
    env.globals.update(clip=clip, tool_calls=tool_calls, event_details=event_details,
                       attempt_label=attempt_label,
                       finished=lambda status: status in TERMINAL, describe=describe,
                       status_names=STATUS_NAMES, error_label=error_label,
                       cost_text=cost_text)
    return env
