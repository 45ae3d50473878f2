"""`kanban check` finds broken invariants and a damaged file, `--repair` fixes what is safe;
`kanban backup` takes a verified online copy; each fault of the file has its own message."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from kanban.backup import backup
from kanban.errors import KanbanError
from kanban.state.postgres import PostgresDatabase
from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.pg import skip_or_fail
from tests.support.procs import kanban, query, start_dispatcher, stop, wait_until


def break_invariants(board: BoardFiles) -> dict[str, int]:
    """Rows as a crash in the wrong place, or a hand edit, could leave them."""
    stale = board.add("has an open run", priority=10)
    assert board.kb.claim(1, lease_s=30)[0].card_id == stale
    dep = board.add("unfinished dependency")
    ready = board.add("ready too early")
    running = board.add("running without a run")
    with board.kb.db.write() as conn:
        conn.run("INSERT INTO dependency (card_id, depends_on_id) VALUES (:a, :b)",
                 {"a": ready, "b": dep})
        conn.run("UPDATE card SET status = 'running', claim_token = 'gone', "
                 "lease_expires_at = :now, attempt = 1 WHERE id = :id",
                 {"id": running, "now": board.kb.clock()})
        conn.run("UPDATE card SET status = 'ready', claim_token = NULL, lease_expires_at = NULL "
                 "WHERE id = :id", {"id": stale})
    return {"ready": ready, "running": running, "stale": stale}


def test_check_finds_and_repairs_broken_invariants(board: BoardFiles) -> None:
    assert kanban(board.path, "check").stdout.splitlines() == ["integrity: ok",
                                                               "invariants: ok"]
    ids = break_invariants(board)
    found = kanban(board.path, "check", check=False)
    assert found.returncode == 1
    text = found.stdout
    assert f"#{ids['running']} is running without an open run and a lease" in text
    assert f"#{ids['ready']} is ready but depends on unfinished" in text
    assert f"of #{ids['stale']} is open though its card is not running" in text
    fixed = kanban(board.path, "check", "--repair")
    assert "repaired:" in fixed.stdout and "found:" not in fixed.stdout
    assert kanban(board.path, "check").returncode == 0
    assert query(board.path, "SELECT status FROM card WHERE id = ?", ids["running"]) == [
        ("ready",)]
    assert query(board.path, "SELECT status FROM card WHERE id = ?", ids["ready"]) == [
        ("todo",)]


def test_a_corrupt_page_is_named_and_check_says_so(board: BoardFiles) -> None:
    for n in range(300):
        board.add(f"card {n} " + "x" * 200)
    board.kb.db.dispose()
    with closing(sqlite3.connect(board.path)) as conn:  # every page into the main file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        leaves = [n for (n,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'card' "
                                             "AND pagetype = 'leaf' ORDER BY pageno")]
    with board.path.open("r+b") as f:  # scribble over a page in the middle of the card table
        f.seek((leaves[len(leaves) // 2] - 1) * page_size)
        f.write(b"\xff" * page_size)
    listed = kanban(board.path, "list", "--all", check=False)
    assert listed.returncode == 1
    assert listed.stderr.startswith("kanban: error: the database file is corrupt")
    assert "kanban check" in listed.stderr and "Traceback" not in listed.stderr
    assert len(listed.stderr.strip().splitlines()) == 1
    checked = kanban(board.path, "check", check=False)
    assert checked.returncode == 1
    assert checked.stdout.startswith("integrity: DAMAGED")


def test_backup_while_a_dispatcher_works_restores_to_a_sound_board(board: BoardFiles,
                                                                   tmp_path: Path) -> None:
    spec = board.script("slow", slow_steps(0.1, heartbeats=1))
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')
    for n in range(30):
        board.add(f"card {n}")
    d = start_dispatcher(board.path, "--max-workers", "3", log=tmp_path / "d.log")
    try:
        wait_until(lambda: query(board.path, "SELECT count(*) FROM card WHERE status = "
                                 "'running'")[0][0] > 0, timeout=60, what="workers at work")
        copy = tmp_path / "copy.db"
        made = kanban(board.path, "backup", str(copy))
        assert made.stdout.startswith(f"backup written to {copy} (30 cards")
    finally:
        stop(d)
    assert os.stat(copy).st_mode & 0o777 == 0o600
    restored = tmp_path / "restored" / "kanban.db"
    restored.parent.mkdir()
    shutil.copy(copy, restored)
    # Cards that were running in the copy had live workers then: check lists them, repairs.
    kanban(restored, "check", "--repair", check=False)
    assert kanban(restored, "check").returncode == 0
    assert query(restored, "SELECT count(*) FROM card") == [(30,)]
    again = kanban(board.path, "backup", str(copy), check=False)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_backup_of_postgres_points_to_pg_dump(tmp_path: Path) -> None:
    with pytest.raises(KanbanError, match="pg_dump"):
        backup(PostgresDatabase("postgresql://nobody@127.0.0.1:1/none"), tmp_path / "b")


def test_a_read_only_database_has_its_own_message(board: BoardFiles) -> None:
    """Made read-only by file modes, or (root ignores modes) by the immutable attribute."""
    board.kb.db.dispose()
    as_root = os.geteuid() == 0
    if as_root and shutil.which("chattr") is None:
        skip_or_fail("needs chattr as root (root ignores file modes)")
    if as_root:
        subprocess.run(["chattr", "+i", str(board.path)], check=True)
    else:
        board.path.chmod(0o400)
        board.path.parent.chmod(0o500)
    try:
        added = kanban(board.path, "add", "cannot be stored", check=False)
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(board.path)], check=True)
        else:
            board.path.parent.chmod(0o700)
            board.path.chmod(0o600)
    assert added.returncode == 1
    assert added.stderr.startswith("kanban: error: the database is read-only")
    assert len(added.stderr.strip().splitlines()) == 1


def test_retry_requeues_failed_cards_in_bulk(board: BoardFiles) -> None:
    failed = [board.add(f"failed {n}", max_attempts=1) for n in range(3)]
    kept = board.add("failed on another board", max_attempts=1)
    board.kb.ensure_board("other")
    with board.kb.db.write() as conn:
        conn.run("UPDATE card SET board = 'other' WHERE id = :id", {"id": kept})
        conn.run("UPDATE card SET status = 'failed', finished_at = :now, attempt = 1",
                 {"now": board.kb.clock()})
    done = kanban(board.path, "retry", "--status", "failed", "--since", "1h")
    assert done.stdout.strip() == f"requeued 3 failed card(s): {', '.join(f'#{i}' for i in failed)}"
    assert query(board.path, "SELECT id FROM card WHERE status = 'ready' ORDER BY id") == [
        (i,) for i in failed]
    assert query(board.path, "SELECT status FROM card WHERE id = ?", kept) == [("failed",)]
    both = kanban(board.path, "retry", "1", "--status", "failed", check=False)
    assert both.returncode == 2 and "not both" in both.stderr


def test_repair_requeues_a_restored_running_card_whose_dispatcher_is_gone(
        board: BoardFiles) -> None:
    """A backup taken while a card ran: its run is open, its lease lapses, its dispatcher's
    row is a dead one's. README: --repair puts it back to ready (no attempt spent)."""
    from kanban import control

    card = board.add("ran at backup time")
    with board.kb.db.write() as conn:
        gone = control.register_dispatcher(conn, host="an-old-host", pid=4242,
                                           now=board.kb.clock())
        control.stop_dispatcher(conn, gone, board.kb.clock())
    board.kb.claim(1, lease_s=30, dispatcher_id=gone, host="an-old-host")
    with board.kb.db.write() as conn:  # the backup is restored a minute later
        conn.run("UPDATE card SET lease_expires_at = '2000-01-01 00:00:00' WHERE id = :id",
                 {"id": card})
    found = kanban(board.path, "check", check=False)
    assert found.returncode == 1
    assert f"#{card} is running past its lease and no live dispatcher owns it" in found.stdout
    kanban(board.path, "check", "--repair")
    assert query(board.path, "SELECT status, attempt - retry_base FROM card WHERE id = ?",
                 card) == [("ready", 0)]
    assert kanban(board.path, "check").returncode == 0
