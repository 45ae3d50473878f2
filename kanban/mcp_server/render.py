"""What an MCP client is shown: JSON text in which stored text is spelled out and bounded.

Titles, goals, results and comments were written by people and models. An MCP client may
print a tool's answer on a terminal (Claude Code runs in one) or hand it to a model, so
every string goes through `textsafety.visible` (controls spelled out, `\\x1b`) and is then
cut to a limit; the JSON text itself is then made inert too (`textsafety.json_safe`). Lists
are bounded by the callers, so every answer has a bounded size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kanban.textsafety import cut_middle, json_safe, visible

FIELD_LIMIT = 2_000  # any string not named below
LIMITS: Mapping[str, int] = {
    "title": 300,
    "goal": 8_000,
    "context": 8_000,
    "result": 16_000,
    "error": 4_000,
    "feedback": 4_000,
    "body": 4_000,  # a comment's
    "snippet": 600,
    "progress": 300,
    "command": 2_000,
}
ERROR_LIMIT = 600  # the one line an error result carries


def bounded(value: Any, key: str = "") -> Any:
    """`value` with every string spelled out and cut (by its key's limit); dict keys too."""
    if isinstance(value, str):
        return cut_middle(visible(value), LIMITS.get(key, FIELD_LIMIT))
    if isinstance(value, Mapping):
        return {visible(str(k))[:100]: bounded(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(item, key) for item in value]
    return value


def to_text(value: Any) -> str:
    """The JSON an MCP client receives: bounded strings, no raw control anywhere."""
    return json_safe(json.dumps(bounded(value), ensure_ascii=False, default=str))


def error_line(message: str) -> str:
    """An error as one inert line within ERROR_LIMIT characters."""
    spelled = visible(message.replace("\n", " "), one_line=True)
    return cut_middle(spelled, ERROR_LIMIT).replace("\n", " ")
