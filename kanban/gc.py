"""`kanban gc`: archive finished cards past an age and prune what they left behind.

Each batch is one short write transaction: archive up to `batch` cards, delete their
transcripts and their events (one `archived` event stays per card, saying it was pruned);
their worker logs and scratch workspaces go after the commit, and so do their git worktrees
through the `remove_worktree` the caller gives (kanban/ runs no git; branches stay). Other
writers get the lock
between batches. SQLite then gives the freed pages back in small steps
(`PRAGMA incremental_vacuum`) where the file allows it; elsewhere they are reused.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from kanban.state.plans import in_list
from kanban.state.sandbox_paths import card_home_path
from kanban.state.store import Conn, Database
from kanban.states import TERMINAL
from kanban.workspaces import scratch_dir

BATCH = 500  # cards per write transaction
VACUUM_PAGES = 2000  # pages given back per step (8 MB at 4 KiB pages)

# The board view's index of finished cards serves this: (board, status, updated_at DESC).
_PICK = ("SELECT id, attempt, workspace FROM card WHERE board = :board AND status = :status "
         "AND archived_at IS NULL AND updated_at < :cutoff "
         "ORDER BY updated_at DESC, id DESC LIMIT :n")


@dataclass
class GcReport:
    """What one `kanban gc` removed."""

    archived: int = 0
    messages: int = 0
    events: int = 0
    logs: int = 0
    workspaces: int = 0
    worktrees: int = 0  # git worktrees removed (their branches stay)
    batches: int = 0
    pages_freed: int = 0
    pages_reusable: int = 0  # freed inside a file that cannot shrink in place

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Pruned:
    card_id: int
    board: str
    attempts: int
    scratch: bool  # its workspace was the scratch directory (gc may remove it)


RemoveWorktree = Callable[[Path], bool]  # a checkout's path -> whether it was removed


def collect(db: Database, home: Path, *, older_than: timedelta, now: datetime,
            board: str | None = None, batch: int = BATCH,
            on_batch: Callable[[GcReport], None] | None = None,
            remove_worktree: RemoveWorktree | None = None) -> GcReport:
    """Archive and prune every finished card last changed before `now - older_than`."""
    report = GcReport()
    cutoff = now - older_than
    with db.read() as conn:
        boards = [board] if board is not None else conn.column("SELECT name FROM board")
    for name in boards:
        for status in sorted(TERMINAL):
            while True:
                with db.write() as conn:
                    pruned = _prune_batch(conn, name, str(status), cutoff, now, batch, report)
                if not pruned:
                    break
                report.batches += 1
                _remove_files(home, pruned, report, remove_worktree)
                if on_batch is not None:
                    on_batch(report)
                if len(pruned) < batch:
                    break
    _give_back_pages(db, report)
    return report


def _prune_batch(conn: Conn, board: str, status: str, cutoff: datetime, now: datetime,
                 batch: int, report: GcReport) -> list[_Pruned]:
    rows = conn.all(_PICK, {"board": board, "status": status, "cutoff": cutoff, "n": batch})
    if not rows:
        return []
    marks, ids = in_list("c", [row[0] for row in rows])
    conn.run(f"UPDATE card SET archived_at = :now, updated_at = :now WHERE id IN ({marks})",
             {"now": now, **ids})
    report.messages += conn.run(
        f"DELETE FROM message WHERE run_id IN (SELECT id FROM run WHERE card_id IN ({marks}))",
        ids)
    report.events += conn.run(f"DELETE FROM event WHERE card_id IN ({marks})", ids)
    data = json.dumps({"pruned": True, "status": status}, sort_keys=True)
    conn.many("INSERT INTO event (board, card_id, run_id, kind, actor, data, at) "
              "VALUES (:board, :card_id, NULL, 'archived', 'gc', :data, :at)",
              [{"board": board, "card_id": row[0], "data": data, "at": now} for row in rows])
    report.archived += len(rows)
    return [_Pruned(card_id, board, attempts, workspace in (None, "", "scratch"))
            for card_id, attempts, workspace in rows]


def _remove_files(home: Path, pruned: list[_Pruned], report: GcReport,
                  remove_worktree: RemoveWorktree | None = None) -> None:
    """Worker logs, scratch workspaces, worktrees and sandbox HOMEs of pruned cards (never
    a path outside home)."""
    logs = home / "logs"
    for card in pruned:
        for attempt in range(1, card.attempts + 1):
            log = logs / f"{card.card_id}-{attempt}.log"
            if log.is_file() and not log.is_symlink():
                log.unlink(missing_ok=True)
                report.logs += 1
        workspace = scratch_dir(home, card.board, card.card_id)
        if remove_worktree is not None and (workspace / ".git").is_file():  # a worktree's
            report.worktrees += remove_worktree(workspace)
        elif card.scratch and workspace.is_dir() and not workspace.is_symlink() \
                and not (workspace / ".git").exists():  # a worktree there is left to git
            shutil.rmtree(workspace, ignore_errors=True)
            report.workspaces += 1
        own_home = card_home_path(home, card.board, card.card_id)  # a sandboxed card's HOME
        if own_home.is_dir() and not own_home.is_symlink():
            shutil.rmtree(own_home, ignore_errors=True)


def _give_back_pages(db: Database, report: GcReport) -> None:
    """SQLite: hand freed pages back to the file system in bounded steps (a file made with
    auto_vacuum=INCREMENTAL); otherwise count the pages later writes will reuse."""
    from kanban.state.sqlite import SQLiteDatabase

    if not isinstance(db, SQLiteDatabase):
        return
    with db.read() as conn:
        incremental = int(conn.scalar("PRAGMA auto_vacuum")) == 2
        free = int(conn.scalar("PRAGMA freelist_count"))
    if not incremental:
        report.pages_reusable = free
        return
    raw = db.connect()  # its own connection: a script commits as it goes
    try:
        while free:
            # The driver steps an incremental_vacuum pragma once; a script runs it out.
            raw.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES});")
            left = int(raw.execute("PRAGMA freelist_count").fetchone()[0])
            if left >= free:
                break
            report.pages_freed += free - left
            free = left
    finally:
        raw.close()
