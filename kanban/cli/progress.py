"""The live table of a lead's (or a swarm's) cards on a terminal, and their final lines."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kanban.cli import output
from kanban.textsafety import visible

if TYPE_CHECKING:
    from kanban.children import ChildStatus


def children_lines(statuses: Sequence[ChildStatus], now: datetime) -> list[str]:
    """One line per child: state, what it is doing or its result, elapsed time."""
    from kanban.activity import describe

    lines = []
    for s in statuses:
        end = s.finished_at or now
        elapsed = f"{(end - s.started_at).total_seconds():.1f}s" if s.started_at else "-"
        if s.status == "running":  # its latest heartbeat note, then what it is doing
            note = " · ".join(part for part in (s.progress, describe(s.activity, compact=True))
                              if part)
        else:
            note = s.result or s.error or ""
        lines.append(f"#{s.id} {s.status} {elapsed}  {s.title}"
                     + (f": {output.one_line(note)}" if note else ""))
    return lines


class Progress:
    """A live table of the children on a terminal's stderr; nothing when piped."""

    def __init__(self, chatty: bool) -> None:
        self.live: Any = None
        self.enabled = chatty and output.is_terminal(sys.stderr)

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(stderr=True, highlight=False),
                             refresh_per_second=8, transient=True)
            self.live.__enter__()
        return self

    def update(self, statuses: list[ChildStatus]) -> None:
        if self.live is not None:
            from rich.text import Text

            from kanban.state.timeutil import utcnow

            self.live.update(Text(visible("\n".join(children_lines(statuses, utcnow())))))

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)
