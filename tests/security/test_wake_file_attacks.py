"""The board's wake-up file (`kanban.db-wake`) is opened by every writer after a commit a
dispatcher acts on, and by the dispatcher to watch it. Something planted at its path (a
FIFO nobody reads, a symlink) must neither hang a commit nor the dispatcher, nor write
through to another file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from kanban.cards import NewCard
from kanban.dispatcher.wake import ChangeWatcher
from kanban.service import Kanban
from kanban.state.sqlite import SQLiteDatabase
from kanban.state.wakefile import wakefile_path
from tests.support.db import open_sqlite


def _in_a_process(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run `code` where a hang ends in a timeout, not in a stuck test session."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)


def test_a_fifo_at_the_wake_file_hangs_no_commit(tmp_path: Path) -> None:
    board = tmp_path / "kanban.db"
    open_sqlite(board).dispose()
    os.mkfifo(wakefile_path(board))  # nobody ever opens it for reading
    done = _in_a_process(
        "import sys; from kanban.cards import NewCard; from kanban.service import Kanban; "
        "from tests.support.db import open_sqlite; "
        f"db = open_sqlite({str(board)!r}); "
        "print(Kanban(db).add_card(NewCard('ready, so it rings')).id); db.dispose()")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_a_fifo_at_the_wake_file_hangs_no_watcher(tmp_path: Path) -> None:
    board = tmp_path / "kanban.db"
    db = open_sqlite(board)
    os.mkfifo(wakefile_path(board))
    done = _in_a_process(
        "from pathlib import Path; from kanban.dispatcher.wake import ChangeWatcher; "
        f"w = ChangeWatcher(Path({str(board)!r}), wakeups_only=True); "
        "print(w._wakefile is None); w.close()")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"  # it falls back to watching the folder
    watcher = ChangeWatcher(board, wakeups_only=True)
    try:  # and still wakes on a commit that matters
        event = threading.Event()
        watcher.wait(0, event)
        thread = threading.Thread(target=lambda: Kanban(db).add_card(NewCard("ready")))
        thread.start()
        assert watcher.wait(10, event)
        thread.join()
    finally:
        watcher.close()
        db.dispose()


def test_a_symlinked_wake_file_is_not_watched_or_written(tmp_path: Path) -> None:
    board = tmp_path / "kanban.db"
    db = open_sqlite(board)
    assert isinstance(db, SQLiteDatabase)
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    wakefile_path(board).symlink_to(target)
    watcher = ChangeWatcher(board, wakeups_only=True)
    try:
        assert watcher._wakefile is None  # noqa: SLF001 - the folder is watched instead
        Kanban(db).add_card(NewCard("ready"))
        assert target.read_text() == "keep me"
    finally:
        watcher.close()
        db.dispose()
