"""Boards where WAL cannot live: a network filesystem is recognised from the mount table, a
board in rollback mode stays in it for every process, and each face says what it costs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from kanban.state import DbLocation, open_database
from kanban.state.journal import ROLLBACK, WAL, mount_type
from tests.support.procs import kanban

MOUNTS = """\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/root rw
40 22 0:38 / /mnt/share rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2
41 22 0:39 / /mnt/share\\040two rw,relatime shared:21 - cifs //host/two rw
42 40 0:40 / /mnt/share/local rw,relatime shared:22 - tmpfs tmpfs rw
"""


def test_the_mount_holding_a_path_names_its_filesystem() -> None:
    assert mount_type(Path("/mnt/share/proj/.kanban/kanban.db"), MOUNTS) == "nfs4"
    assert mount_type(Path("/mnt/share two/x"), MOUNTS) == "cifs"  # octal-escaped space
    assert mount_type(Path("/mnt/share/local/x"), MOUNTS) == "tmpfs"  # the deepest mount
    assert mount_type(Path("/mnt/sharex/x"), MOUNTS) == "ext4"  # a prefix is not a parent
    assert mount_type(Path("/home/x"), MOUNTS) == "ext4"


def test_a_rollback_board_stays_in_rollback_for_every_process(tmp_path: Path) -> None:
    path = tmp_path / "kanban.db"
    init = kanban(path, "init", "--journal", "rollback")
    assert "journal: rollback, not WAL" in init.stderr
    assert "readers wait for writers" in init.stderr and "PostgreSQL" in init.stderr
    again = open_database(DbLocation(str(path), "flag"))
    try:
        assert again.journal_warning() is not None
        assert again.journal.mode == ROLLBACK  # type: ignore[attr-defined]
    finally:
        again.dispose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    status = json.loads(kanban(path, "status", "--json").stdout)
    assert "rollback" in status["journal_warning"] and status["journal"] == "rollback"
    assert "journal: rollback" in kanban(path, "status").stdout


def test_a_new_board_on_a_local_disk_keeps_wal_and_says_nothing(tmp_path: Path) -> None:
    path = tmp_path / "kanban.db"
    init = kanban(path, "init")
    assert "journal" not in init.stderr
    db = open_database(DbLocation(str(path), "flag"))
    try:
        assert db.journal_warning() is None and db.journal.mode == WAL  # type: ignore[attr-defined]
    finally:
        db.dispose()
    status = json.loads(kanban(path, "status", "--json").stdout)
    assert status["journal_warning"] is None and status["journal"] == "wal"
    assert "journal: wal" in kanban(path, "status").stdout


def test_a_dispatcher_on_a_rollback_board_says_so_first_and_works(tmp_path: Path) -> None:
    path = tmp_path / "kanban.db"
    kanban(path, "init", "--journal", "rollback")
    script = tmp_path / "finish.json"
    script.write_text(json.dumps([{"tool_calls": [
        {"name": "kanban_complete", "arguments": {"summary": "done"}}]}]))
    (tmp_path / "config.toml").write_text(f'[profiles.default]\nmodel = "scripted:{script}"\n')
    card = kanban(path, "add", "one card").stdout.strip().lstrip("#")
    run = kanban(path, "dispatch", "--once")
    lines = [line for line in run.stderr.splitlines() if "dispatching from" not in line]
    assert "journal: rollback" in lines[0], run.stderr
    assert json.loads(kanban(path, "show", card, "--json").stdout)["card"]["status"] == "done"


def test_a_board_on_a_network_filesystem_falls_back_and_claims_stay_exact(
        tmp_path: Path) -> None:
    """The mount table says the board's folder is NFS: the board never turns WAL on, says
    why, and its claims work as on any board (a second connection, a claim, a complete)."""
    from kanban.cards import NewCard
    from kanban.service import Kanban
    from kanban.state.sqlite import SQLiteDatabase

    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 259:2 / / rw - ext4 /dev/root rw\n"
                     f"40 22 0:38 / {tmp_path} rw - nfs4 server:/export rw,vers=4.2\n")
    path = tmp_path / "kanban.db"
    kanban(path, "init")  # made on the local view of the disk: WAL
    db = SQLiteDatabase(path, mount_table=table)
    try:
        warning = db.journal_warning()
        assert warning is not None and "network filesystem (nfs4)" in warning
        kb = Kanban(db)
        card = kb.add_card(NewCard("on nfs")).id
        claimed = kb.claim(1, lease_s=30)
        assert [c.card_id for c in claimed] == [card]
    finally:
        db.dispose()
    with sqlite3.connect(path) as conn:  # left WAL for the rollback journal, intact
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
