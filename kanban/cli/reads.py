"""Read models the CLI needs that `Kanban` does not offer as one call.

Each is a single read transaction over library functions; no SQL lives here. The
library modules load inside the function that needs them (`show` needs none of them).
`Transcript` and `ChildNode` are kanban.readmodels' (the web board shares those plans).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kanban.errors import BoardNotFound

if TYPE_CHECKING:
    from kanban.children import TreeTotals
    from kanban.control import DispatcherInfo
    from kanban.cron.manage import UpcomingFire
    from kanban.notify.outbox import FailingTarget
    from kanban.queries import LiveWorker
    from kanban.readmodels import ChildNode, Transcript
    from kanban.service import Kanban
    from kanban.state.paths import DbLocation
    from kanban.state.store import Conn


def dispatcher_json(d: DispatcherInfo) -> dict[str, Any]:
    breaker = None if d.breaker is None else {"reason": d.breaker[0],
                                              "since": d.breaker[1].isoformat()}
    return {"id": d.id, "host": d.host, "pid": d.pid, "started_at": d.started_at.isoformat(),
            "heartbeat_at": d.heartbeat_at.isoformat(), "breaker": breaker}


@dataclass(frozen=True)
class Status:
    """`kanban status`: where things are, counts per state, pause flags, who is working."""

    version: str
    database: str
    database_source: str  # flag | env | project | user
    config: str  # the file read: $KANBAN_CONFIG, else config.toml beside the database
    config_exists: bool
    board: str | None
    counts: dict[str, int]
    paused_globally: bool
    paused_boards: list[str]
    dispatchers: list[DispatcherInfo]
    workers: list[LiveWorker]
    next_fires: list[UpcomingFire]
    sandbox: dict[int, str] = field(default_factory=dict)  # by live dispatcher: bwrap or why not
    journal: str | None = None  # SQLite without WAL: what that costs (None: all is well)
    journal_mode: str | None = None  # SQLite: wal or rollback
    config_error: str | None = None  # why the config cannot be used (as `dispatch` says it)
    reach: dict[str, Any] = field(default_factory=dict)  # by profile that runs commands
    failing_notifications: list[FailingTarget] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version, "database": self.database,
            "database_source": self.database_source, "config": self.config,
            "config_exists": self.config_exists, "config_error": self.config_error,
            "board": self.board, "counts": self.counts, "total": sum(self.counts.values()),
            "paused_globally": self.paused_globally, "paused_boards": self.paused_boards,
            "dispatchers": [dispatcher_json(d) for d in self.dispatchers],
            "workers": len(self.workers),
            "next_fires": [f.to_json() for f in self.next_fires],
            "sandbox": {str(k): v for k, v in self.sandbox.items()},
            "journal": self.journal_mode, "journal_warning": self.journal,
            "reach": self.reach,
            "failing_notifications": [f.to_json() for f in self.failing_notifications],
        }


def status(kanban: Kanban, board: str | None, location: DbLocation) -> Status:
    from kanban import __version__
    from kanban.control import live_dispatchers, pause_state, sandbox_notes
    from kanban.notify.outbox import failing_targets
    from kanban.queries import live_workers, status_counts

    boards = kanban.boards()
    if board is not None and board not in {b["name"] for b in boards}:
        raise BoardNotFound(board)
    config, config_error = _config_in_use(location)
    with kanban.db.read() as conn:
        dispatchers = live_dispatchers(conn, kanban.clock())
        return Status(
            version=__version__, database=kanban.db.display, database_source=location.source,
            config=str(config), config_exists=config.exists(),
            board=board,
            counts=status_counts(conn, board),
            paused_globally=pause_state(conn, None).global_paused,
            paused_boards=[str(b["name"]) for b in boards if b["paused"]],
            dispatchers=dispatchers,
            workers=live_workers(conn, board=board),
            next_fires=_next_fires(kanban, conn, board),
            sandbox=sandbox_notes(conn, [d.id for d in dispatchers]),
            journal=kanban.db.journal_warning(), journal_mode=kanban.db.journal_mode(),
            config_error=config_error,
            failing_notifications=failing_targets(conn, board),
        )


def _config_in_use(location: DbLocation) -> tuple[Path, str | None]:
    """The config file `dispatch` would read, and why it would refuse it (None: it is fine),
    checked by the same loader."""
    from kanban.state.config import CONFIG_ENV
    from kanban.state.config_file import resolve_config
    from kanban.state.errors import ConfigError

    explicit = os.environ.get(CONFIG_ENV)
    path = Path(explicit).expanduser() if explicit else location.home / "config.toml"
    try:
        resolve_config(location.home)
    except ConfigError as exc:
        return path, exc.message
    return path, None


def _next_fires(kanban: Kanban, conn: Conn, board: str | None) -> list[UpcomingFire]:
    from kanban.cron.presence import any_will_fire

    if not any_will_fire(conn, board=board):  # most boards: cron's imports not paid at all
        return []
    from kanban.cron.service import next_fires  # here: cron's imports cost every command

    return next_fires(kanban.db, kanban.clock(), board=board)


def transcript(kanban: Kanban, card_id: int) -> Transcript:
    from kanban.readmodels import transcript_plan
    from kanban.state.plans import run_plan

    with kanban.db.read() as conn:
        return run_plan(conn, transcript_plan(card_id))


def child_tree(kanban: Kanban, card_id: int) -> list[ChildNode]:
    """A card's children and their descendants, bounded in depth and total cards."""
    from kanban.readmodels import child_tree_plan
    from kanban.state.plans import run_plan

    with kanban.db.read() as conn:
        return run_plan(conn, child_tree_plan(card_id))


def tree_totals(kanban: Kanban, card_id: int) -> TreeTotals:
    """Turns, tokens and cost of a card and every card below it."""
    from kanban.children import tree_totals as totals

    with kanban.db.read() as conn:
        return totals(conn, card_id)
