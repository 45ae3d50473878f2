"""Durations as people type them: `15m`, `2 hours`, `1.5h`, `90` (seconds, where allowed)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from kanban.state.errors import KanbanError

UNIT_SECONDS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 604800),
}
UNIT_HINT = "use s, m, h, d or w"
_AMOUNT_UNIT = re.compile(r"(?P<amount>[-+]?\d+(?:\.\d+)?)?\s*(?P<unit>[a-z]*)")


class DurationError(KanbanError):
    """A duration that cannot be read; the message says why (without the value)."""


def parse_seconds(text: str, what: str, *, example: str, bare_seconds: bool = False) -> int:
    """Whole, positive seconds of `<n><unit>`; n defaults to 1 (`hour`), and a bare number
    means seconds only with `bare_seconds`."""
    match = _AMOUNT_UNIT.fullmatch(text.strip().lower())
    if match is None or not (match["amount"] or match["unit"]):
        form = example.rsplit(" ", 1)[0] + " " if " " in example else ""
        raise DurationError(f"expected '{form}<number><unit>' such as '{example}' ({UNIT_HINT})")
    try:
        amount = Decimal(match["amount"] or "1")
    except InvalidOperation:  # pragma: no cover - the pattern only lets decimals through
        raise DurationError(f"cannot read the number in '{text}'") from None
    unit = match["unit"] or ("s" if bare_seconds else "")
    if not unit:
        raise DurationError(f"missing unit ({UNIT_HINT})")
    if unit not in UNIT_SECONDS:
        raise DurationError(f"unknown unit '{unit}' ({UNIT_HINT})")
    seconds = amount * UNIT_SECONDS[unit]
    if seconds <= 0:
        raise DurationError(f"{what} must be positive")
    if seconds < 1:
        raise DurationError(f"{what} must be at least 1 second")
    if seconds != seconds.to_integral_value():
        raise DurationError(f"{what} must be a whole number of seconds")
    return int(seconds)
