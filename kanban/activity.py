"""A running worker's live activity, as stored on its run row, in words for the faces.

The worker writes `{"phase", "turn", "max_turns", "model", "tools", "tokens", "cost"}`
(see `kanban.worker.activity`); the board, `show`, `workers` and `run` describe it.
"""

from __future__ import annotations

import json
from typing import Any

PHASES = {"starting": "starting", "model": "waiting for the model", "thinking": "thinking",
          "writing": "writing a call", "tools": "running", "finished": "finishing"}


def parse(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """The activity as a dict ({} when there is none or it is unreadable)."""
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def describe(raw: str | dict[str, Any] | None, *, compact: bool = False) -> str:
    """`running terminal · turn 3/20 · 12.3k tokens · $0.0123`; compact for board cells."""
    activity = parse(raw)
    if not activity:
        return ""
    parts = [_doing(activity, compact)]
    turn, limit = activity.get("turn") or 0, activity.get("max_turns") or 0
    if turn:
        parts.append(f"t{turn}/{limit}" if compact and limit else
                     f"turn {turn}/{limit}" if limit else f"turn {turn}")
    tokens = activity.get("tokens") or 0
    if tokens:
        parts.append(f"{short_number(tokens)}{'' if compact else ' tokens'}")
    cost = activity.get("cost") or 0
    if cost:
        parts.append(money(cost))
    return " · ".join(p for p in parts if p)


def _doing(activity: dict[str, Any], compact: bool) -> str:
    phase = str(activity.get("phase") or "")
    tools = [str(t) for t in activity.get("tools") or ()]
    if phase in ("tools", "writing") and tools:
        names = ", ".join(tools)
        return names if compact else f"{PHASES[phase]} {names}"
    if phase in ("model", "thinking") and activity.get("model") and not compact:
        return f"{PHASES[phase]} ({activity['model']})"
    return PHASES.get(phase, phase)


def short_number(value: float) -> str:
    """1234 → 1.2k, 2500000 → 2.5M."""
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(int(value))


def cost_text(dollars: float, unpriced: int) -> str:
    """What model calls cost, saying how many had no known price (not counted as free)."""
    if not unpriced:
        return money(dollars)
    calls = f"{unpriced:,} unpriced call{'' if unpriced == 1 else 's'}"
    return f"unknown ({calls})" if not dollars else f"{money(dollars)} (+{calls})"


def money(dollars: float | None) -> str:
    """Dollars with enough digits for sub-cent amounts."""
    if dollars is None:
        return "-"
    if dollars == 0:
        return "$0"
    return f"${dollars:.4f}" if dollars < 1 else f"${dollars:,.2f}"
