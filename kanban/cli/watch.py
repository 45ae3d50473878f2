"""`kanban board --watch`: redraw when the database changes, not on a timer."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.live import Live

if TYPE_CHECKING:
    from kanban.state.store import Database

AGE_REFRESH_S = 5.0  # ages and heartbeats drift even when nothing is written


def watch(
    db: Database,
    render: Callable[[], RenderableType],
    *,
    console: Console,
    interval: float = 0.2,
    stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Draw, then redraw whenever another connection commits; returns the frames drawn."""
    changed = _change_detector(db)
    with Live(render(), console=console, auto_refresh=False, transient=False) as live:
        frames, drawn_at = 1, clock()
        while not stop():
            sleep(interval)
            if changed() or clock() - drawn_at >= AGE_REFRESH_S:
                live.update(render(), refresh=True)
                frames, drawn_at = frames + 1, clock()
    return frames


def _change_detector(db: Database) -> Callable[[], bool]:
    """True when the data changed since the last call (SQLite's PRAGMA data_version).

    Reads go through the pool's one connection, so successive versions are comparable.
    Other backends fall back to the periodic redraw.
    """
    if db.dialect != "sqlite":
        return lambda: False

    def version() -> int:
        with db.read() as conn:
            return db.data_version(conn)

    last = [version()]

    def changed() -> bool:
        now = version()
        if now == last[0]:
            return False
        last[0] = now
        return True

    return changed
