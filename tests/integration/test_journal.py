"""Boards where WAL cannot live: a network filesystem is recognised from the mount table, a
board in rollback mode stays in it for every process, and each face says what it costs."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

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
    started = [line for line in kanban(path, "dispatch", "--once").stderr.splitlines()
               if " started: " in line]
    assert len(started) == 1 and started[0].endswith(", journal: wal"), started


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
    assert any("started:" in line and line.endswith(", journal: rollback") for line in lines)
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


NO_SHM = "unix-dotfile"  # SQLite's VFS without shared memory, as some filesystems have none


def _claims_on(path: Path, vfs: str) -> tuple[str | None, list[int], list[int]]:
    """Through `vfs`: the journal warning, two cards added, and what one claim takes."""
    from kanban.cards import NewCard
    from kanban.service import Kanban

    db = open_database(DbLocation(str(path), "flag"), create=True, vfs=vfs)
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        added = [kb.add_card(NewCard(f"card {n}")).id for n in range(2)]
        claimed = [c.card_id for c in kb.claim(5, lease_s=30)]
        return db.journal_warning(), added, claimed
    finally:
        db.dispose()


def _header(path: Path) -> tuple[str, str]:
    with sqlite3.connect(path) as conn:
        return (conn.execute("PRAGMA journal_mode").fetchone()[0],
                conn.execute("PRAGMA integrity_check").fetchone()[0])


def test_a_new_board_where_wal_cannot_be_enabled_falls_back_with_the_warning(
        tmp_path: Path) -> None:
    """Through a VFS without shared memory SQLite refuses WAL: the board keeps the rollback
    journal, says why and what it costs, and claims as any board does."""
    path = tmp_path / "kanban.db"
    warning, added, claimed = _claims_on(path, NO_SHM)
    assert warning is not None and "SQLite could not enable WAL" in warning, warning
    assert "readers wait for writers" in warning and "PostgreSQL" in warning
    assert claimed == added
    assert not (tmp_path / "kanban.db-wal").exists() and not (tmp_path / "kanban.db-shm").exists()
    assert _header(path) == ("delete", "ok")
    # The choice is the board's: the CLI, on the ordinary VFS, keeps it and says so.
    status = json.loads(kanban(path, "status", "--json").stdout)
    assert status["journal"] == "rollback" and "rollback" in status["journal_warning"]


def test_a_wal_board_opened_where_there_is_no_shared_memory_leaves_wal(
        tmp_path: Path) -> None:
    """A board made with WAL, then opened through a VFS without shared memory (a folder
    moved to such a filesystem): SQLite cannot even read it there; the board leaves WAL
    for the rollback journal instead of failing, and nothing is lost."""
    path = tmp_path / "kanban.db"
    kanban(path, "init")
    kanban(path, "add", "made with WAL")
    assert _header(path) == ("wal", "ok")
    with sqlite3.connect(f"{path.as_uri()}?vfs={NO_SHM}", uri=True) as raw, \
            pytest.raises(sqlite3.OperationalError, match="unable to open"):
        raw.execute("SELECT count(*) FROM card").fetchone()  # what SQLite alone does
    warning, added, claimed = _claims_on(path, NO_SHM)
    assert warning is not None and "no shared memory" in warning, warning
    assert claimed == [1, *added]  # the card added under WAL is there, and claimed first
    assert _header(path) == ("delete", "ok")


def test_a_second_host_on_a_network_filesystem_board_is_refused(tmp_path: Path) -> None:
    """The board's folder is NFS (per the mount table) and a dispatcher of another host is
    alive on it: this host's dispatcher refuses to start, saying to move to PostgreSQL. A
    dispatcher of this same host beside it is not refused."""
    from kanban import control
    from kanban.dispatcher.loop import Dispatcher
    from kanban.errors import KanbanError
    from kanban.service import Kanban
    from kanban.state.config import Config
    from kanban.state.sqlite import SQLiteDatabase

    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 259:2 / / rw - ext4 /dev/root rw\n"
                     f"40 22 0:38 / {tmp_path} rw - nfs4 server:/export rw,vers=4.2\n")
    path = tmp_path / "kanban.db"
    kanban(path, "init")
    db = SQLiteDatabase(path, mount_table=table)
    try:
        kb = Kanban(db)
        here = Dispatcher(kb, Config(), home=tmp_path, db_target=str(path))
        with db.write() as conn:
            control.register_dispatcher(conn, host=here.host, pid=os.getpid(),
                                        now=kb.clock())
        here._check_journal()  # the same host: SQLite's locks hold between its processes
        with db.write() as conn:
            control.register_dispatcher(conn, host="other-host", pid=4242, now=kb.clock())
        with pytest.raises(KanbanError) as refused:
            Dispatcher(kb, Config(), home=tmp_path, db_target=str(path)).start()
        assert "network filesystem (nfs4)" in refused.value.message
        assert "other-host" in refused.value.message and "PostgreSQL" in refused.value.message
        with db.read() as conn:  # it never registered
            assert len(control.live_dispatchers(conn, kb.clock())) == 2
    finally:
        db.dispose()


def test_a_command_from_a_second_host_on_a_network_filesystem_board_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads a mount table saying the board's folder is NFS; a dispatcher of
    another host is alive on the board: every command here is one error line saying to
    move to PostgreSQL. Once that dispatcher is gone, commands work (in rollback mode)."""
    from click.testing import CliRunner

    from kanban import control
    from kanban.cli.app import app
    from kanban.state import journal

    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 259:2 / / rw - ext4 /dev/root rw\n"
                     f"40 22 0:38 / {tmp_path} rw - nfs4 server:/export rw,vers=4.2\n")
    path = tmp_path / "kanban.db"
    kanban(path, "init")
    db = open_database(DbLocation(str(path), "flag"))
    try:
        with db.write() as conn:
            other = control.register_dispatcher(conn, host="other-host", pid=4242,
                                                 now=db.clock())
    finally:
        db.dispose()
    real = journal.network_fs
    monkeypatch.setattr("kanban.state.journal.network_fs",
                        lambda folder, _table: real(folder, table))
    runner = CliRunner()
    refused = runner.invoke(app, ["--db", str(path), "add", "from a second host"])
    assert refused.exit_code == 1, refused.output
    assert refused.output.startswith("kanban: error: the board is on a network filesystem "
                                     "(nfs4) and dispatcher"), refused.output
    assert "other-host" in refused.output and "PostgreSQL" in refused.output
    assert refused.output.count("\n") == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM card").fetchone() == (0,)
        conn.execute("UPDATE dispatcher SET stopped_at = heartbeat_at WHERE id = ?", (other,))
    added = runner.invoke(app, ["--db", str(path), "add", "from this host"])
    assert added.exit_code == 0, added.output
