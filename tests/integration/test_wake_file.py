"""A SQLite dispatcher sleeps on the board's wake-up file: kanban's writers touch it after a
commit that a dispatcher acts on (a card ready, scheduled, cancelled or settled as a child;
spawning paused or resumed), never after one it does not (a comment), nor after a rollback."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.dispatcher.wake import ChangeWatcher, change_watcher
from kanban.service import Kanban
from kanban.state.sqlite import SQLiteDatabase
from kanban.state.store import Database
from kanban.state.wakefile import ring, wakefile_path
from tests.support.db import claim_one, worker


@pytest.fixture
def watcher(db: Database) -> Iterator[ChangeWatcher]:
    found = change_watcher(db, wakeups_only=True)
    assert isinstance(found, ChangeWatcher)
    yield found
    found.close()


def touched(db: Database) -> int:
    assert isinstance(db, SQLiteDatabase)
    return wakefile_path(db.path).stat().st_mtime_ns


def rings(db: Database, action: Callable[[], object]) -> bool:
    """Whether `action` touched the wake-up file (an mtime moves by at least a tick)."""
    path = wakefile_path(db.path)  # type: ignore[attr-defined]
    os.utime(path, ns=(0, 0))
    action()
    return touched(db) != 0


def woken(watcher: ChangeWatcher, action: Callable[[], object]) -> bool:
    event = threading.Event()
    watcher.wait(0, event)  # forget earlier changes
    thread = threading.Thread(target=action)
    thread.start()
    changed = watcher.wait(10, event)
    thread.join()
    return changed


def test_what_a_dispatcher_acts_on_rings_and_nothing_else(
        kb: Kanban, db: Database, watcher: ChangeWatcher) -> None:
    parent = kb.add_card(NewCard("parent"))
    claim = claim_one(kb, parent.id)
    assert rings(db, lambda: kb.add_card(NewCard("new and ready")))
    later = kb.clock() + timedelta(hours=1)  # the dispatcher then sleeps until its time
    assert rings(db, lambda: kb.add_card(NewCard("scheduled", run_at=later)))
    assert rings(db, lambda: kb.set_paused(True))
    assert rings(db, lambda: kb.set_paused(False))
    child = kb.add_card(NewCard("child", parent_id=parent.id, priority=9))
    child_claim = claim_one(kb, child.id)
    assert rings(db, lambda: kb.complete(child.id, "ok", actor=worker(child_claim)))
    assert not rings(db, lambda: kb.comment(parent.id, "no wake-up for a comment"))
    blocker = kb.add_card(NewCard("first this"))
    assert not rings(db, lambda: kb.add_card(NewCard("then this", depends_on=[blocker.id])))
    assert rings(db, lambda: kb.cancel(parent.id))
    del claim


def test_a_rolled_back_transaction_rings_nobody(kb: Kanban, db: Database,
                                               watcher: ChangeWatcher) -> None:
    def add_then_fail() -> None:
        with pytest.raises(RuntimeError), db.write() as conn:
            conn.run("INSERT INTO wakeup (id, seq) VALUES (1, 1) ON CONFLICT (id) DO UPDATE "
                     "SET seq = seq + 1", {})
            raise RuntimeError("changed my mind")

    assert not rings(db, add_then_fail)
    assert rings(db, lambda: kb.add_card(NewCard("then a real one")))


def test_the_watcher_wakes_on_a_ring_not_on_other_commits(
        kb: Kanban, db: Database, watcher: ChangeWatcher) -> None:
    card = kb.add_card(NewCard("a card"))
    assert woken(watcher, lambda: kb.add_card(NewCard("ready")))
    quiet = threading.Event()
    watcher.wait(0, quiet)
    kb.comment(card.id, "nobody needs to hear this")
    assert not watcher.wait(0.3, quiet)


def test_a_deleted_wake_up_file_is_watched_again(kb: Kanban, db: Database,
                                                  watcher: ChangeWatcher) -> None:
    path = wakefile_path(db.path)  # type: ignore[attr-defined]
    path.unlink()
    assert woken(watcher, lambda: kb.add_card(NewCard("after the file went")))
    assert path.exists()
    assert woken(watcher, lambda: kb.add_card(NewCard("and once more")))


def test_another_programs_commit_rings_nothing(db: Database, watcher: ChangeWatcher) -> None:
    """The sqlite3 shell carries none of kanban's triggers: its ready card waits for the
    dispatcher's tick, and its connection works as any other (no unknown function)."""
    def shell_insert() -> None:
        with sqlite3.connect(db.path) as raw:  # type: ignore[attr-defined]
            raw.execute("UPDATE board SET paused = 1 WHERE name = 'default'")

    assert not rings(db, shell_insert)


def test_ringing_never_follows_a_symlink(tmp_path: Path) -> None:
    board = tmp_path / "kanban.db"
    target = tmp_path / "precious"
    target.write_text("keep me")
    wakefile_path(board).symlink_to(target)
    ring(board)
    assert target.read_text() == "keep me"


def test_arming_never_waits_for_a_lock(tmp_path: Path) -> None:
    """A rollback-journal board whose writer holds the lock: arming gives up at once (the
    wait would come out of the caller's patience for its BEGIN) and tries at a later
    write; the connection keeps its busy timeout."""
    import time

    from kanban.state.wakefile import RingingConnection
    from tests.support.db import open_sqlite

    path = tmp_path / "kanban.db"
    open_sqlite(path).dispose()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    raw = sqlite3.connect(path, timeout=5, isolation_level=None, factory=RingingConnection)
    try:
        started = time.monotonic()
        assert raw.arm() is False
        assert time.monotonic() - started < 1.0  # not the 5 s busy timeout
        assert raw.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        holder.execute("ROLLBACK")
        assert raw.arm() is True
    finally:
        raw.close()
        holder.close()


def test_the_temp_schema_keeps_a_few_pages_of_cache(tmp_path: Path) -> None:
    """The TEMP triggers are all that schema holds: its cache is a couple of pages, not the
    20 a database gets (each of 400 workers' connections paid 80 KiB for them)."""
    from kanban.state.wakefile import TEMP_CACHE_PAGES, RingingConnection
    from tests.support.db import open_sqlite

    path = tmp_path / "kanban.db"
    open_sqlite(path).dispose()
    raw = sqlite3.connect(path, isolation_level=None, factory=RingingConnection)
    try:
        assert raw.arm() is True
        assert raw.execute("PRAGMA temp.cache_size").fetchone()[0] == TEMP_CACHE_PAGES
        assert raw.execute("PRAGMA main.cache_size").fetchone()[0] != TEMP_CACHE_PAGES
    finally:
        raw.close()
