"""Faults of the host never burn the queue: a database made immutable for five seconds
under a 200-card run, or a full disk, costs no attempt and fails no card; the dispatcher's
circuit breaker opens, says so, and closes by itself.

These need root (chattr, mount); they skip without it.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from tests.acceptance.conftest import BoardFiles
from tests.support.pg import skip_or_fail
from tests.support.procs import kanban, query, start_dispatcher, stop, wait_until

FAULT_S = 5.0  # how long the fault lasts: the stimulus, not a wait for a state
CARDS = 200

@pytest.fixture
def _root_and_chattr() -> None:
    """These faults need root (chattr +i, mount): skip elsewhere, fail under CI=true."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        skip_or_fail("needs root and chattr")


def quick_board(home: Path, cards: int) -> Path:
    path = home / "kanban.db"
    db = open_database(DbLocation(str(path), "flag"), create=True)
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        board = BoardFiles(path, kb)
        spec = board.script("quick", [
            {"tool_calls": [{"name": "kanban_show", "arguments": {}}], "delay_s": 0.05},
            {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "ok"}}]}])
        board.configure(f'[profiles.default]\nmodel = "{spec}"\n')
        for n in range(cards):
            kb.add_card(NewCard(title=f"card {n}"))
    finally:
        db.dispose()
    return path


def done(path: Path) -> int:
    """Cards done; -1 while the file cannot be read (a removed WAL's aftermath)."""
    try:
        return int(query(path, "SELECT count(*) FROM card WHERE status = 'done'")[0][0])
    except sqlite3.DatabaseError:
        return -1


def wait_for_all_done(path: Path) -> None:
    """Until every card is done, as long as cards keep finishing (a busy machine is slow,
    not stuck: a minute without progress is)."""
    while (now := done(path)) < CARDS:
        wait_until(lambda n=now: done(path) > n, timeout=60, interval=0.2,
                   what=f"a card done after {now} of {CARDS}")


def run_through_fault(path: Path, log: Path, fault: Callable[[], Iterator[None]]) -> None:
    """Start a 4-worker dispatcher, apply the fault for FAULT_S once cards are flowing, and
    wait for every card to be done."""
    dispatcher = start_dispatcher(path, "--max-workers", "4", "-v", log=log)
    try:
        wait_until(lambda: done(path) >= 10, timeout=60, what="cards flowing")
        with contextmanager(fault)():
            time.sleep(FAULT_S)
            assert dispatcher.poll() is None, log.read_text()
        wait_for_all_done(path)
        assert dispatcher.poll() is None, log.read_text()
    finally:
        code = stop(dispatcher)
    assert code == 0, log.read_text()


def assert_nothing_burnt(path: Path, log: Path) -> None:
    assert query(path, "SELECT status, count(*) FROM card GROUP BY status") == [("done", CARDS)]
    assert query(path, "SELECT count(*) FROM card WHERE attempt - retry_base != 1") == [(0,)]
    completed = query(path, "SELECT card_id, count(*) FROM run WHERE outcome = 'completed' "
                      "GROUP BY card_id")
    assert len(completed) == CARDS and {n for _, n in completed} == {1}
    assert query(path, "PRAGMA integrity_check") == [("ok",)]
    text = log.read_text()
    assert "Traceback" not in text
    assert "circuit breaker open" in text and "circuit breaker closed" in text, text


@pytest.mark.usefixtures("_root_and_chattr")
@pytest.mark.slow
def test_an_immutable_database_for_five_seconds_spends_no_attempt(tmp_path: Path) -> None:
    path = quick_board(tmp_path, CARDS)
    log = tmp_path / "dispatcher.log"

    def immutable() -> Iterator[None]:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        try:
            yield
            # By now the breaker is open, and a reader sees it (reads need no write).
            wait_until(lambda: "circuit breaker open since" in kanban(path, "status").stdout,
                       timeout=30, what="the open breaker in kanban status")
            assert "circuit breaker open: not claiming" in kanban(path, "board").stdout
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)

    run_through_fault(path, log, immutable)
    assert_nothing_burnt(path, log)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        skip_or_fail("needs root to mount a tmpfs")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        if (mount / "logs").is_dir():  # kept for a failure's post-mortem
            shutil.copytree(mount / "logs", tmp_path / "logs", dirs_exist_ok=True)
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_full_disk_pauses_the_dispatcher_which_resumes_after(small_disk: Path,
                                                               tmp_path: Path) -> None:
    path = quick_board(small_disk, CARDS)
    log = tmp_path / "dispatcher.log"
    filler = small_disk / "filler"

    def full() -> Iterator[None]:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # unbuffered: nothing is left to flush into the full disk on close
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError:
            pass
        finally:
            os.close(fd)
        try:
            yield
            assert kanban(path, "add", "while full", check=False).stderr.strip() \
                .startswith("kanban: error: the disk holding the database is full")
        finally:
            filler.unlink()

    run_through_fault(path, log, full)
    assert_nothing_burnt(path, log)



@pytest.mark.slow
def test_a_removed_wal_is_put_back_and_a_restart_finds_everything(tmp_path: Path) -> None:
    """The -wal file deleted again and again for FAULT_S under a 200-card run, then the
    dispatcher restarted: the dispatcher's guard puts the same log back each time, no
    process starts a second one, and no card fails or spends an attempt."""
    path = quick_board(tmp_path, CARDS)
    log = tmp_path / "dispatcher.log"
    wal = Path(f"{path}-wal")
    dispatcher = start_dispatcher(path, "--max-workers", "4", "-v", log=log)
    try:
        wait_until(lambda: done(path) >= 10, timeout=60, what="cards flowing")
        inode, removals = wal.stat().st_ino, 0
        deadline = time.monotonic() + FAULT_S
        while time.monotonic() < deadline:
            wal.unlink()
            removals += 1
            wait_until(lambda: wal.exists() and wal.stat().st_ino == inode, timeout=10,
                       what="the log put back")
            wait_until(lambda n=removals: log.read_text().count("put it back") >= n, timeout=10,
                       what="the dispatcher saying so")
        wait_until(lambda: "circuit breaker closed" in log.read_text(), timeout=30,
                   what="the breaker closed")
        assert dispatcher.poll() is None, log.read_text()
        assert stop(dispatcher) == 0, log.read_text()
        dispatcher = start_dispatcher(path, "--max-workers", "4", "-v", log=log)
        wait_for_all_done(path)
    finally:
        code = stop(dispatcher)
    assert code == 0, log.read_text()
    assert_nothing_burnt(path, log)
    assert not list(tmp_path.glob(".kanban.db.walguard.*")), "the guard's link outlived it"
